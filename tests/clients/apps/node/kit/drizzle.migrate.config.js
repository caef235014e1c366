// drizzle-kit's configuration for the generate + migrate recipe
// (drizzle-kit-migrate.mjs): the same schema as the push recipe, with the
// migrations written to KIT_OUT and applied to KIT_DATABASE (a fresh
// database the recipe makes; the guide's own would name a folder and its
// database as any drizzle config does).

import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './kit/schema.js',
  out: process.env.KIT_OUT,
  dbCredentials: {
    host: process.env.PGHOST ?? 'localhost',
    port: Number(process.env.PGPORT ?? 5432),
    user: process.env.PGUSER,
    password: process.env.PGPASSWORD || undefined,
    database: process.env.KIT_DATABASE,
    ssl: false,
  },
});
