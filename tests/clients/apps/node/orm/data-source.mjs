// TypeORM's data source for the TypeORM recipe (typeorm.mjs): two entities
// whose keys the database fills with snowflake_nextval(), and the
// migrations of ORM_MIGRATIONS, applied to ORM_DATABASE.

// #region guide:typeorm-entities
import { DataSource, EntitySchema } from 'typeorm';

export const OrmUser = new EntitySchema({
  name: 'OrmUser',
  tableName: 'orm_users',
  columns: {
    // bigint arrives as a string (node-postgres's default): exact.
    id: { type: 'bigint', primary: true, default: () => 'snowflake_nextval()' },
    name: { type: 'text', unique: true },
  },
});

export const OrmPost = new EntitySchema({
  name: 'OrmPost',
  tableName: 'orm_posts',
  columns: {
    id: { type: 'bigint', primary: true, default: () => 'snowflake_nextval()' },
    authorId: { type: 'bigint', name: 'author_id' },
    title: { type: 'text' },
  },
  relations: {
    author: { type: 'many-to-one', target: 'OrmUser', joinColumn: { name: 'author_id' } },
  },
});
// #endregion

export default new DataSource({
  type: 'postgres',
  host: process.env.PGHOST ?? 'localhost',
  port: Number(process.env.PGPORT ?? 5432),
  username: process.env.PGUSER,
  password: process.env.PGPASSWORD || undefined,
  database: process.env.ORM_DATABASE,
  entities: [OrmUser, OrmPost],
  migrations: [`${process.env.ORM_MIGRATIONS}/*.js`],
});
