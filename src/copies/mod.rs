//! Data that came from another cluster (a `pg_upgrade`, a restored dump, a
//! logical initial copy), floored before this server issues an ID in it.
//!
//! A database is checked once per change, not once per session: shared
//! memory keeps which databases were checked since the last change (the
//! core's `floored`), and a session whose database is among them reads no
//! table at its first ID. What counts as a change: rows written into a
//! record of floors (the record's guard tells, at commit), a
//! subscription's tables changing state (every process hears it from the
//! catalog's invalidations, at commit); a database dropped is forgotten. A
//! backend that has taken IDs compares the generation of changes at each
//! ID, so a dump restored into a database in use is checked before the
//! next ID of every session.
//!
//! The check reads the database's record of floors
//! (`snowflake_id.snowflake_floors`, see the core's `copies`) and the state
//! of its subscriptions' finished initial copies: two reads of small
//! tables, never a scan of the data. Only where a floor is needed is the
//! data read: the largest value of every column whose default calls a
//! generating function, through its index where it has one, and every
//! later ID goes above it (the mark, WAL-logged, as
//! `snowflake_resume_above` moves it). One session floors a database at a
//! time; the others wait for its result. Only superusers and the
//! database's owner may write the record (the guard), so no other role can
//! make a database floor. `DROP SUBSCRIPTION` and `ALTER SUBSCRIPTION` can
//! remove the catalog's account of copies no floor covered yet: before
//! they run, the record is told (a row of `COPIED_UNFLOORED`).
//!
//! The extension acts on its own behalf here: the record (only the
//! extension's own table of that name) and the catalog are read as the
//! bootstrap superuser, from the newest committed data (never the caller's
//! snapshot). Every column is read at the storage level, by its table's
//! OID (`pg::scan`): no name lookup, planner, cast, policy or privilege
//! check, so nothing a table's owner writes or revokes runs in or fails a
//! floor. Tables alone are read (never views, foreign tables, nor other
//! sessions' temporary tables), under the caller's statement timeout; a
//! table's lock is waited for at most `max_wait`, then the ID fails
//! (55000): a transaction a role leaves open stalls nobody. Values more than an hour ahead of the clock are not taken for
//! IDs (one row would otherwise move the whole server's IDs that far):
//! their database refuses IDs until an operator settles them.
//!
//! One concern per file, lowest first (each calls only those before it):
//! `changes` (the generation of changes and the transaction callbacks),
//! `columns` (which columns may hold IDs), `reads` (their largest values),
//! `record` (the record of floors' rows), `leases` (the backfill leases'
//! rows), `floor` (the check, the floor and `snowflake_resume_above`). This
//! file names the surface the rest of the shell calls, and holds nothing.

mod changes;
mod columns;
mod floor;
mod leases;
mod reads;
mod record;

pub use changes::{checked, database_dropped, listen, record_altered, record_written};
pub use floor::{floor_if_copied, problem, resume_above_everything};
pub use leases::{record_lease, recorded_leases};
pub use record::{before_subscription_change, is_record, note_floor};
