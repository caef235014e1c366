-- The first migration of a Prisma project with snowflake keys. `prisma
-- migrate dev` writes the statements below the first (here they are written
-- by hand in its form, for schema.prisma: its schema engine is a download
-- the test machines cannot make); the first is added by hand, once: Prisma
-- replays the migrations into a fresh database (its shadow database, a new
-- environment, `migrate reset`), where the default's function does not exist
-- until the extension is created.
CREATE EXTENSION IF NOT EXISTS snowflake_id;

-- CreateTable
CREATE TABLE "prisma_users" (
    "id" BIGINT NOT NULL DEFAULT snowflake_nextval(),
    "name" TEXT NOT NULL,

    CONSTRAINT "prisma_users_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "prisma_posts" (
    "id" BIGINT NOT NULL DEFAULT snowflake_nextval(),
    "author_id" BIGINT NOT NULL,
    "title" TEXT NOT NULL,

    CONSTRAINT "prisma_posts_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "prisma_users_name_key" ON "prisma_users"("name");

-- CreateIndex
CREATE UNIQUE INDEX "prisma_posts_title_key" ON "prisma_posts"("title");

-- AddForeignKey
ALTER TABLE "prisma_posts" ADD CONSTRAINT "prisma_posts_author_id_fkey" FOREIGN KEY ("author_id") REFERENCES "prisma_users"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
