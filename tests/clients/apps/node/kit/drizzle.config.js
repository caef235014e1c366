// drizzle-kit's configuration for the push recipe (drizzle-kit-push.mjs).
// No schemaFilter and no tablesFilter on purpose: drizzle-kit 0.31.11 then
// looks at schema "public" only (its config schema defaults schemaFilter to
// ["public"], read from node_modules/drizzle-kit/bin.cjs), where the
// extension keeps only functions, which drizzle-kit does not manage.

// #region guide:kit-config
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './kit/schema.js',
  dbCredentials: {
    host: process.env.PGHOST ?? 'localhost', // a socket directory works too
    port: Number(process.env.PGPORT ?? 5432),
    user: process.env.PGUSER,
    password: process.env.PGPASSWORD || undefined,
    database: process.env.PGDATABASE,
    ssl: false,
  },
});
// #endregion
