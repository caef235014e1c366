// The schema drizzle-kit push applies (kit/drizzle.config.js): two tables
// whose keys are snowflake IDs. Only tables are declared: the extension's
// objects (functions in public; its tables and view in schema snowflake_id)
// are not the application's and appear nowhere here.

// #region guide:kit-schema
import { sql } from 'drizzle-orm';
import { bigint, index, pgTable, text } from 'drizzle-orm/pg-core';

export const kitUsers = pgTable('kit_users', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`snowflake_nextval()`),
  name: text('name').notNull(),
});

export const kitPosts = pgTable('kit_posts', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`snowflake_nextval()`),
  authorId: bigint('author_id', { mode: 'bigint' }).notNull().references(() => kitUsers.id),
  title: text('title').notNull(),
}, (t) => [index('kit_posts_author_id_idx').on(t.authorId)]);
// #endregion
