// The Prisma recipe's client side (prisma.mjs runs it with tsx, after
// `prisma generate`): prints what the client handed over, for prisma.mjs to
// compare with the server's own text of each ID.
// #region guide:prisma-client
import { PrismaPg } from '@prisma/adapter-pg';
import { PrismaClient } from './generated/client.ts';

const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: process.env.DATABASE_URL }) });
// BigInt IDs are exact; JSON.stringify refuses BigInts: write them as strings.
const toJson = (value) => JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? v.toString() : v));
// #endregion

const made = await prisma.user.createManyAndReturn({
  data: Array.from({ length: 100 }, (_, i) => ({ name: `user ${i}` })),
});
await prisma.post.createMany({
  data: made.flatMap((u) => [0, 1].map((k) => ({ authorId: u.id, title: `${u.name} post ${k}` }))),
});
// #region guide:prisma-use
const users = await prisma.user.findMany({ include: { posts: true }, orderBy: { id: 'asc' } });
// An ID from a nested row finds its own row.
const one = await prisma.user.findUnique({ where: { id: users[0].posts[0].authorId } });
// Raw SQL that builds JSON: IDs as text, so no JSON.parse on the way can round them.
const rawText = await prisma.$queryRaw`SELECT json_agg(json_build_object('id', id::text, 'name', name)) AS users FROM prisma_users`;
// #endregion
let stringifyError = null;
try {
  JSON.stringify(users);
} catch (e) {
  stringifyError = String(e);
}
const rawNumbers = await prisma.$queryRaw`SELECT json_agg(json_build_object('id', id, 'name', name)) AS users FROM prisma_users`;
console.log(toJson({
  made: made.map((u) => [u.name, u.id, typeof u.id]),
  users: users.map((u) => [u.name, u.id, u.posts.map((p) => [p.title, p.id, p.authorId])]),
  one: [one.name, one.id],
  rawText: rawText[0].users.map((u) => [u.name, u.id]),
  rawNumbers: rawNumbers[0].users.map((u) => [u.name, String(u.id)]),
  stringifyError,
}));
await prisma.$disconnect();
