//! What a user sees through SQL, on a real server with the library
//! preloaded and `snowflake_id.worker_id = 42` (see `pg_test` in lib.rs).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Runs `sql` and returns `(sqlstate, message, hint)` of the error it
    /// raises, or `None` if it succeeds. The statement runs in a PL/pgSQL
    /// exception block, i.e. its own subtransaction.
    fn error_of(sql: &str) -> Option<(String, String, String)> {
        Spi::run(
            r#"CREATE OR REPLACE FUNCTION pg_temp.error_of(q text) RETURNS text[] LANGUAGE plpgsql AS $$
               DECLARE st text; msg text; hint text;
               BEGIN
                 EXECUTE q;
                 RETURN NULL;
               EXCEPTION WHEN OTHERS THEN
                 GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
                 RETURN ARRAY[st, msg, hint];
               END $$"#,
        )
        .unwrap();
        let got: Option<Vec<Option<String>>> =
            Spi::get_one_with_args("SELECT pg_temp.error_of($1)", &[sql.into()]).unwrap();
        got.map(|v| {
            let part = |i: usize| v.get(i).cloned().flatten().unwrap_or_default();
            (part(0), part(1), part(2))
        })
    }

    fn expect_error(sql: &str, sqlstate: &str, message_part: &str, hint_part: &str) {
        let (st, msg, hint) = error_of(sql).unwrap_or_else(|| panic!("no error from {sql}"));
        assert_eq!(st, sqlstate, "{sql}: {msg}");
        assert!(
            msg.contains(message_part),
            "{sql}: message {msg:?} lacks {message_part:?}"
        );
        assert!(
            hint.contains(hint_part),
            "{sql}: hint {hint:?} lacks {hint_part:?}"
        );
        assert!(
            !msg.contains("panicked") && !msg.contains(".rs:"),
            "{sql}: internal text in {msg:?}"
        );
    }

    fn one<T: FromDatum + IntoDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql)
            .unwrap()
            .unwrap_or_else(|| panic!("{sql} returned NULL"))
    }

    #[pg_test]
    fn nextval_increases_and_carries_this_servers_worker_and_time() {
        let ids: Vec<i64> = (0..2000)
            .map(|_| one::<i64>("SELECT snowflake_nextval()"))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(one::<bool>(&format!(
            "SELECT bool_and(worker_id = 42) FROM unnest(ARRAY{ids:?}::bigint[]) AS i, snowflake_decode(i)"
        )));
        let drift_ms = one::<f64>(&format!(
            "SELECT abs(extract(epoch FROM snowflake_timestamp({}) - clock_timestamp()))::float8 * 1000",
            ids[ids.len() - 1]
        ));
        assert!(drift_ms < 5_000.0, "ID time is {drift_ms} ms off the clock");
    }

    #[pg_test]
    fn batches_are_increasing_and_interleave_with_single_calls() {
        let batch: Vec<i64> = Spi::connect(|c| {
            c.select("SELECT snowflake_nextval_batch(10000)", None, &[])
                .unwrap()
                .map(|r| r.get::<i64>(1).unwrap().unwrap())
                .collect()
        });
        assert_eq!(batch.len(), 10_000);
        assert!(batch.windows(2).all(|w| w[0] < w[1]));
        let after = one::<i64>("SELECT snowflake_nextval()");
        assert!(after > batch[batch.len() - 1]);
        assert!(one::<bool>(
            "SELECT bool_and(a < b) FROM (SELECT i AS a, lead(i) OVER () AS b FROM snowflake_nextval_batch(1000000) i) s WHERE b IS NOT NULL"
        ));
    }

    #[pg_test]
    fn batch_size_is_checked() {
        for n in ["0", "-1", "1000001"] {
            expect_error(
                &format!("SELECT snowflake_nextval_batch({n})"),
                "22023",
                &format!("not {n}"),
                "several times",
            );
        }
        assert_eq!(
            one::<i64>("SELECT count(*) FROM snowflake_nextval_batch(1)"),
            1
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM snowflake_nextval_batch(NULL)"),
            0
        );
    }

    #[pg_test]
    fn decode_works_as_a_column_and_as_a_table() {
        let id = one::<i64>("SELECT snowflake_nextval()");
        let (ts1, w1, s1) = Spi::get_three::<TimestampWithTimeZone, i32, i32>(&format!(
            "SELECT (snowflake_decode({id})).ts, (snowflake_decode({id})).worker_id, (snowflake_decode({id})).sequence"
        ))
        .unwrap();
        let (ts2, w2, s2) = Spi::get_three::<TimestampWithTimeZone, i32, i32>(&format!(
            "SELECT * FROM snowflake_decode({id})"
        ))
        .unwrap();
        assert_eq!((ts1, w1, s1), (ts2, w2, s2));
        assert_eq!(w1, Some(42));
        assert_eq!(
            ts1,
            Some(one::<TimestampWithTimeZone>(&format!(
                "SELECT snowflake_timestamp({id})"
            )))
        );
        assert_eq!(s1, Some((id & 4095) as i32));
    }

    #[pg_test]
    fn decode_reads_ids_of_other_systems() {
        let (ts, worker, seq) = Spi::get_three::<String, i32, i32>(
            "SELECT ts::text, worker_id, sequence FROM snowflake_decode(175928847299117063, 'discord')",
        )
        .unwrap();
        assert_eq!(
            (ts.as_deref(), worker, seq),
            (Some("2016-04-30 11:18:25.796+00"), Some(32), Some(7))
        );
        assert_eq!(
            one::<String>("SELECT snowflake_timestamp(1212092628029698048, 'TWITTER')::text"),
            "2019-12-31 19:26:16.771+00"
        );
        // Sonyflake: time | sequence | machine.
        let (w, s) = Spi::get_two::<i32, i32>(&format!(
            "SELECT worker_id, sequence FROM snowflake_decode({}, 'sonyflake')",
            (5i64 << 24) | (0x12 << 16) | 0xABCD
        ))
        .unwrap();
        assert_eq!((w, s), (Some(0xABCD), Some(0x12)));
        // Instagram's 64-bit IDs: a negative bigint is a valid ID from after 2046.
        assert_eq!(
            one::<i32>("SELECT worker_id FROM snowflake_decode(-1, 'instagram')"),
            8191
        );
        // A custom layout names its own epoch.
        assert_eq!(
            one::<String>("SELECT ts::text FROM snowflake_decode(4194304, 'time=41,worker=10,sequence=12,unit=1ms,epoch=2025-01-01 00:00:00+00')"),
            "2025-01-01 00:00:00.001+00"
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM snowflake_layouts()"), 8);
    }

    #[pg_test]
    fn out_of_range_ids_and_times_are_errors_never_wrong_answers() {
        expect_error(
            "SELECT snowflake_decode(-1)",
            "22003",
            "from 0 to 9223372036854775807",
            "belong together",
        );
        expect_error(
            "SELECT snowflake_timestamp(-5)",
            "22003",
            "-5 is not an ID",
            "",
        );
        expect_error(
            "SELECT snowflake_decode(9007199254740992, 'js53')",
            "22003",
            "2^53 - 1",
            "",
        );
        expect_error(
            "SELECT snowflake_decode(1, 'nope')",
            "22023",
            "unknown layout 'nope'",
            "'twitter'",
        );
        expect_error(
            "SELECT snowflake_decode(1, 'time=41,worker=10,sequence=12,unit=1ms')",
            "22023",
            "no epoch",
            "epoch=",
        );
        expect_error(
            "SELECT snowflake_from_timestamp('2024-12-31 23:59:59.999+00')",
            "22008",
            "runs from 2025-01-01 00:00:00+00 to 2094-09-07 15:47:35.551+00",
            "at or after 2025-01-01 00:00:00+00",
        );
        expect_error(
            "SELECT snowflake_from_timestamp('infinity')",
            "22008",
            "infinity is outside",
            "",
        );
        expect_error(
            "SELECT snowflake_from_timestamp('2100-01-01+00')",
            "22008",
            "2100-01-01",
            "at or before 2094-09-07 15:47:35.551+00",
        );
        expect_error(
            "SELECT snowflake_from_timestamp(now(), 'baidu')",
            "22008",
            "to 2024-11-20 21:24:15.999+00",
            "",
        );
        assert_eq!(
            one::<i64>("SELECT snowflake_from_timestamp('2025-01-01 00:00:00+00')"),
            0
        );
        assert_eq!(
            one::<i64>("SELECT snowflake_from_timestamp('2025-01-01 00:00:00.0019+00')"),
            1 << 22
        );
    }

    #[pg_test]
    fn from_timestamp_selects_by_time_through_the_primary_key() {
        Spi::run("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)")
            .unwrap();
        Spi::run("INSERT INTO orders (n) SELECT g FROM generate_series(1, 1000) g").unwrap();
        // The other tests run beside this one on the same server and take IDs
        // in bulk, borrowing ticks ahead of the clock, so the first thousand
        // may carry times still to come: wait until the clock has passed the
        // last ID issued (a loop, as another batch may borrow again meanwhile).
        Spi::run(
            "DO $$ BEGIN \
               WHILE (SELECT coalesce(lead >= interval '0', false) FROM snowflake_id.snowflake_status) LOOP \
                 PERFORM pg_sleep(0.005); \
               END LOOP; \
             END $$",
        )
        .unwrap();
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        Spi::run("CREATE TEMP TABLE t AS SELECT clock_timestamp() AS t").unwrap();
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        Spi::run("INSERT INTO orders (n) SELECT g FROM generate_series(1001, 1500) g").unwrap();
        Spi::run("ANALYZE orders").unwrap();
        assert_eq!(one::<i64>("SELECT count(*) FROM orders WHERE id >= snowflake_from_timestamp((SELECT t FROM t))"), 500);
        assert_eq!(
            one::<i64>(
                "SELECT min(n) FROM orders WHERE id >= snowflake_from_timestamp((SELECT t FROM t))"
            ),
            1001
        );
        let plan = one::<pgrx::Json>(
            "EXPLAIN (FORMAT JSON) SELECT * FROM orders WHERE id >= snowflake_from_timestamp(now() + interval '1 hour')",
        );
        let plan = plan.0.to_string();
        assert!(
            plan.contains("orders_pkey"),
            "the primary key was not used: {plan}"
        );
    }

    #[pg_test]
    fn functions_declare_volatility_strictness_and_parallel_safety() {
        let got: Vec<String> = Spi::connect(|c| {
            c.select(
                "SELECT p.oid::regprocedure::text || ' ' || provolatile::text || proisstrict::int::text || proparallel::text
                 FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
                 JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake_id'
                 WHERE p.pronamespace <> 'tests'::regnamespace
                 ORDER BY 1",
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect()
        });
        assert_eq!(
            got,
            [
                "snowflake_adopt_settings() v1u",
                // A trigger function: called by its trigger alone, never in
                // a query, where these attributes would matter.
                "snowflake_claims_guard() v0u",
                // Asks every node of a Citus cluster: opens connections.
                "snowflake_cluster_status() v0u",
                "snowflake_convert(regclass,name,boolean,boolean,boolean) v1u",
                "snowflake_decode(bigint) s1s",
                "snowflake_decode(bigint,text) i1s",
                "snowflake_floors_written() v0u",
                "snowflake_from_opaque(text) s1r",
                "snowflake_from_opaque_or_null(text) s1r",
                "snowflake_from_text(text,text) i1s",
                "snowflake_from_timestamp(timestamp with time zone) s1s",
                "snowflake_from_timestamp(timestamp with time zone,text) i1s",
                // The record of floors' guard: called by its trigger alone.
                "snowflake_id.snowflake_floors_guard() v0u",
                // What other nodes of a Citus cluster ask of this one (in
                // pg_catalog): they read a table and a view.
                "snowflake_id_claims_here() s0s",
                "snowflake_id_status_here() v0s",
                "snowflake_id_to_uuid(bigint) s1s",
                "snowflake_id_to_uuid(bigint,text) i1s",
                // Backend-local state: the leader's draws, not a worker's.
                "snowflake_lastval() v1r",
                "snowflake_layouts() i1s",
                "snowflake_nextval() v1s",
                "snowflake_nextval_array(integer) v1s",
                // Each lease is noted in the record of floors: a write.
                "snowflake_nextval_at(timestamp with time zone) v1u",
                "snowflake_nextval_at_array(timestamp with time zone,integer) v1u",
                "snowflake_nextval_batch(integer) v1s",
                // Creates the registry's objects as its caller; a NULL
                // client is a registry nobody is granted yet.
                "snowflake_registry_init(regrole) v0u",
                // Talks to the registry, writes WAL.
                "snowflake_release_worker_id() v1u",
                "snowflake_resume_above() v1u",
                "snowflake_resume_above(bigint) v1u",
                "snowflake_resume_above(uuid) v1u",
                "snowflake_status() v0s",
                "snowflake_timestamp(bigint) s1s",
                "snowflake_timestamp(bigint,text) i1s",
                // The keys are read per process, at its reloads.
                "snowflake_to_opaque(bigint) s1r",
                "snowflake_to_text(bigint,text) i1s",
                "snowflake_uuid_from_timestamp(timestamp with time zone) s1s",
                "snowflake_uuid_from_timestamp(timestamp with time zone,text) i1s",
                "snowflake_uuid_to_id(uuid) s1s",
                "snowflake_uuid_to_id(uuid,text) i1s",
                "snowflake_uuidv7() v1s",
                "snowflake_vouch_backfill_worker_id(integer) v1u",
            ]
        );
    }

    #[pg_test]
    fn status_reports_what_the_generator_did() {
        let before = one::<i64>("SELECT ids_issued FROM snowflake_id.snowflake_status");
        let last = one::<i64>("SELECT max(i) FROM snowflake_nextval_batch(5000) i");
        let (issued, last_id, problem) = Spi::get_three::<i64, i64, String>(
            "SELECT ids_issued, last_id, problem FROM snowflake_id.snowflake_status",
        )
        .unwrap();
        // Other tests issue IDs on this server at the same time: exact counts
        // are checked on servers of their own (tests/test_concurrency.py).
        assert!(issued.unwrap() >= before + 5000);
        assert!(last_id.unwrap() >= last);
        assert_eq!(problem, None);
        let (worker, layout, pid) = Spi::get_three::<i32, String, i32>(
            "SELECT worker_id, layout, reserver_pid FROM snowflake_id.snowflake_status",
        )
        .unwrap();
        assert_eq!(
            (worker, layout.as_deref()),
            (Some(42), Some("snowflake_id"))
        );
        assert!(pid.is_some(), "the reserver is not running");
        assert!(one::<bool>("SELECT durable_mark >= last_id_time AND time_left > interval '60 years' FROM snowflake_id.snowflake_status"));
    }

    #[pg_test]
    fn adopt_is_for_superusers_and_a_no_op_when_nothing_is_refused() {
        assert!(one::<String>("SELECT snowflake_adopt_settings()").starts_with("nothing to adopt"));
        Spi::run("CREATE ROLE snowflake_test_user; GRANT EXECUTE ON FUNCTION snowflake_adopt_settings() TO snowflake_test_user; SET ROLE snowflake_test_user").unwrap();
        expect_error(
            "SELECT snowflake_adopt_settings()",
            "42501",
            "only a superuser",
            "",
        );
        Spi::run("RESET ROLE").unwrap();
    }
}
