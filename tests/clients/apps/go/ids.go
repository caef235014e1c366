// Recipe: snowflake IDs from Go with pgx v4 (Debian's
// golang-github-jackc-pgx-v4-dev 4.15.0, pgconn 1.11.0, pgtype 1.10.0) and
// database/sql through pgx's stdlib driver, as the application role. Built in
// GOPATH mode against the packages' sources (no module download):
//
//	GO111MODULE=off GOPATH=<the packages' gocode> go run ids.go
//
// with PGHOST (a socket directory or a host), PGPORT, PGUSER, PGDATABASE:
// pgx reads them as libpq does.
//
// What pgx v4 does, read in its source (jackc/pgx v4.15.0, jackc/pgtype
// v1.10.0):
//   - An int8 is read into an int64 (pgtype/convert.go, int64AssignTo):
//     every ID, exactly. Into an int32 it is refused with an error, never
//     cut ("... is greater than maximum value for int32").
//   - Exec without arguments runs the simple protocol (conn.go, exec): a
//     migration of several statements runs as one string.
//   - CopyFrom returns a count of rows, never their keys (copy_from.go).
//   - A json column scanned into anything but a string, bytes or an
//     sql.Scanner goes through encoding/json's Unmarshal (pgtype/json.go,
//     AssignTo): into an int64 field, exact; into an interface{}, a float64,
//     which rounds most IDs above 2^53.
//   - database/sql: the stdlib driver's Exec returns driver.RowsAffected
//     (stdlib/sql.go), whose LastInsertId always answers an error
//     (database/sql/driver/driver.go): the key comes back only with
//     RETURNING.
//
// encoding/json writes an int64's every digit; a JavaScript client reading
// that JSON rounds it: the recipe writes IDs for browsers as strings.
//
// Prints what it checked and "OK go", or "FAIL go: ..." and exits 1 (after
// dropping the tables it made, so it can run again).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
	_ "github.com/jackc/pgx/v4/stdlib"
)

// A failed check: main's deferred cleanup runs, then the run exits 1.
type failure string

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		panic(failure(fmt.Sprintf(format, args...)))
	}
}

func must(err error, what string) {
	check(err == nil, "%s: %v", what, err)
}

// #region guide:go-migration
const migration = `
CREATE EXTENSION IF NOT EXISTS snowflake_id;
CREATE TABLE go_items (
    id   bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    name text NOT NULL UNIQUE
);
CREATE TABLE go_parts (
    id      bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    item_id bigint NOT NULL REFERENCES go_items,
    name    text NOT NULL
);`

// #endregion

// #region guide:go-json
// For browsers: the ID as a string (a JavaScript Number rounds it).
type Item struct {
	ID   int64  `json:"id,string"`
	Name string `json:"name"`
}

// JSON built by the server: an int64 field reads every ID exactly.
type storedItem struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// #endregion

// The server's own text of each item's ID, by name.
func truth(ctx context.Context, pool *pgxpool.Pool) map[string]string {
	rows, err := pool.Query(ctx, "SELECT name, id::text FROM go_items")
	must(err, "reading the items")
	defer rows.Close()
	t := map[string]string{}
	for rows.Next() {
		var name, id string
		must(rows.Scan(&name, &id), "scanning an item")
		t[name] = id
	}
	must(rows.Err(), "reading the items")
	return t
}

func main() {
	os.Exit(run())
}

// The extension's version and how many objects it has: the recipe must
// leave both as they were.
func extension(ctx context.Context, pool *pgxpool.Pool) string {
	var v string
	must(pool.QueryRow(ctx, `SELECT e.extversion || ' ' || count(d.objid)
		FROM pg_extension e JOIN pg_depend d ON d.refobjid = e.oid AND d.deptype = 'e'
		WHERE e.extname = 'snowflake_id' GROUP BY e.extversion`).Scan(&v), "reading the extension")
	return v
}

func run() (code int) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			fmt.Println("FAIL go:", string(f))
			code = 1
		}
	}()
	ctx := context.Background()
	// #region guide:go-connect
	// An empty connection string: pgx takes PGHOST, PGPORT, PGUSER,
	// PGDATABASE (and the rest of libpq's variables) from the environment.
	pool, err := pgxpool.Connect(ctx, "")
	// #endregion
	must(err, "connecting")
	defer pool.Close()
	before := extension(ctx, pool)
	var exists bool
	must(pool.QueryRow(ctx, "SELECT to_regclass('go_items') IS NOT NULL OR to_regclass('go_parts') IS NOT NULL").Scan(&exists), "looking for the tables")
	check(!exists, "go_items or go_parts exists already")
	_, err = pool.Exec(ctx, migration)
	must(err, "the migration")
	dropped := false
	defer func() {
		if dropped {
			return
		}
		if _, err := pool.Exec(ctx, "DROP TABLE go_parts, go_items"); err != nil {
			fmt.Println("cleanup:", err)
		}
	}()
	var layout string
	must(pool.QueryRow(ctx, "SELECT current_setting('snowflake_id.layout')").Scan(&layout), "reading the layout")
	for _, table := range []string{"go_items", "go_parts"} {
		var def string
		must(pool.QueryRow(ctx, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = $1::regclass AND adnum = 1", table).Scan(&def), "reading the default")
		check(def == "snowflake_nextval()", "%s's key default is %q", table, def)
	}
	check(extension(ctx, pool) == before, "the migration changed the extension: %s, before %s", extension(ctx, pool), before)

	// #region guide:go-insert
	// One row: RETURNING the key, read into an int64.
	var id int64
	err = pool.QueryRow(ctx, "INSERT INTO go_items (name) VALUES ($1) RETURNING id", "first").Scan(&id)
	// #endregion
	must(err, "inserting one row")
	t := truth(ctx, pool)
	check(strconv.FormatInt(id, 10) == t["first"], "QueryRow: %d, the server's %s", id, t["first"])
	check((id > 1<<53) == (layout != "js53"), "the IDs are not where the layout puts them")

	// An int32 is refused, not cut.
	var small int32
	err = pool.QueryRow(ctx, "SELECT id FROM go_items WHERE name = 'first'").Scan(&small)
	check(err != nil && strings.Contains(err.Error(), "greater than maximum value for int32"), "an ID scanned into an int32: %v (%d)", err, small)

	// #region guide:go-batch
	// Many rows in one round trip: every row's key, in the order queued.
	batch := &pgx.Batch{}
	for i := 0; i < 100; i++ {
		batch.Queue("INSERT INTO go_items (name) VALUES ($1) RETURNING id", fmt.Sprintf("item %d", i))
	}
	results := pool.SendBatch(ctx, batch)
	keys := make([]int64, batch.Len())
	for i := range keys {
		if err = results.QueryRow().Scan(&keys[i]); err != nil {
			break
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	// #endregion
	must(err, "the batch")
	t = truth(ctx, pool)
	seen := map[int64]bool{}
	for i, k := range keys {
		check(strconv.FormatInt(k, 10) == t[fmt.Sprintf("item %d", i)], "batch row %d: key %d, the server's %s", i, k, t[fmt.Sprintf("item %d", i)])
		seen[k] = true
	}
	check(len(seen) == 100, "the batch returned %d distinct keys", len(seen))
	fmt.Println("keys: QueryRow, a batch of 100 in order, int32 refused: every key the server's")

	// #region guide:go-copy
	// COPY returns a count, not keys: take the keys first, then copy them in.
	var partIDs []int64
	err = pool.QueryRow(ctx, "SELECT snowflake_nextval_array($1)", 1000).Scan(&partIDs)
	if err == nil {
		rows := make([][]interface{}, len(partIDs))
		for i, pid := range partIDs {
			rows[i] = []interface{}{pid, id, fmt.Sprintf("part %d", i)}
		}
		_, err = pool.CopyFrom(ctx, pgx.Identifier{"go_parts"}, []string{"id", "item_id", "name"}, pgx.CopyFromRows(rows))
	}
	// #endregion
	must(err, "the copy")
	var copied, matching int
	must(pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE id = ($1::bigint[])[substr(name, 6)::int + 1]) FROM go_parts", partIDs).Scan(&copied, &matching), "counting the parts")
	check(copied == 1000 && matching == 1000, "CopyFrom: %d rows, %d with the key taken for them", copied, matching)
	fmt.Println("CopyFrom: 1000 rows with keys taken first by snowflake_nextval_array, each where it was meant")

	// JSON the server builds: exact into int64 fields; into interface{},
	// encoding/json makes float64s, which round on the default layout.
	var stored []storedItem
	must(pool.QueryRow(ctx, "SELECT json_agg(i) FROM go_items i").Scan(&stored), "json_agg into structs")
	for _, s := range stored {
		check(strconv.FormatInt(s.ID, 10) == t[s.Name], "json_agg into an int64 field changed %s: %d", t[s.Name], s.ID)
	}
	var loose []map[string]interface{}
	must(pool.QueryRow(ctx, "SELECT json_agg(i) FROM go_items i").Scan(&loose), "json_agg into maps")
	rounded := 0
	for _, m := range loose {
		id, err := strconv.ParseInt(t[m["name"].(string)], 10, 64)
		must(err, "the server's ID")
		if int64(m["id"].(float64)) != id {
			rounded++
		}
	}
	check((rounded > 0) == (layout != "js53"), "json_agg into interface{}: %d of %d IDs changed on %s", rounded, len(loose), layout)
	var raw []byte
	must(pool.QueryRow(ctx, "SELECT json_agg(i) FROM go_items i").Scan(&raw), "json_agg as bytes")
	// #region guide:go-usenumber
	// Into interface{}: UseNumber keeps each number's digits.
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var exact []map[string]interface{}
	err = dec.Decode(&exact)
	// #endregion
	must(err, "decoding with UseNumber")
	for _, m := range exact {
		check(m["id"].(json.Number).String() == t[m["name"].(string)], "UseNumber changed an ID")
	}
	out, err := json.Marshal(Item{ID: id, Name: "first"})
	must(err, "writing JSON")
	check(string(out) == fmt.Sprintf(`{"id":"%d","name":"first"}`, id), "the JSON for browsers is %s", out)
	var back Item
	must(json.Unmarshal(out, &back), "reading the browsers' JSON")
	check(back.ID == id, "the browsers' JSON read back as %d", back.ID)
	fmt.Printf("JSON: int64 fields exact; interface{} rounds %d of %d on %s (UseNumber keeps them); browsers get strings\n", rounded, len(loose), layout)

	// database/sql, through pgx's driver: RETURNING gives the key;
	// LastInsertId is an error.
	// #region guide:go-connect-sql
	db, err := sql.Open("pgx", "") // the same environment variables
	// #endregion
	must(err, "opening database/sql")
	defer db.Close()
	// #region guide:go-database-sql
	var viaSQL int64
	err = db.QueryRowContext(ctx, "INSERT INTO go_items (name) VALUES ($1) RETURNING id", "database/sql").Scan(&viaSQL)
	// #endregion
	must(err, "database/sql insert")
	check(strconv.FormatInt(viaSQL, 10) == truth(ctx, pool)["database/sql"], "database/sql: %d", viaSQL)
	res, err := db.ExecContext(ctx, "INSERT INTO go_items (name) VALUES ('no key back')")
	must(err, "database/sql exec")
	_, err = res.LastInsertId()
	check(err != nil, "LastInsertId answered")
	fmt.Println("database/sql: RETURNING into an int64 exact; LastInsertId is an error")
	// Dropped here, not only deferred: the extension is checked after.
	_, err = pool.Exec(ctx, "DROP TABLE go_parts, go_items")
	must(err, "dropping the tables")
	dropped = true
	check(extension(ctx, pool) == before, "the recipe changed the extension: %s, before %s", extension(ctx, pool), before)
	fmt.Println("the extension: its version and objects as they were")
	fmt.Println("OK go")
	return 0
}
