"""Bulk generation faster than the layout allows: throttled, never failed or repeated."""

from harness import server

# A 53-bit layout (IDs stay exact in JavaScript) with 512 IDs per millisecond:
# one session's batches outrun it, so the generator must throttle.
LAYOUT = "time=42,worker=2,sequence=9,unit=1ms"
TOTAL = 10_000_000
BATCH = 1_000_000


def test_ten_million_ids_through_a_53_bit_layout_are_unique_exact_and_never_too_far_ahead():
    # A batch of a million is two seconds of this layout: beyond max_lead it
    # waits for the clock, and max_wait bounds all of one call's waits.
    conf = {"snowflake_id.layout": f"'{LAYOUT}'", "snowflake_id.max_lead": "'1s'", "snowflake_id.max_wait": "'5s'"}
    with server("bulk", conf=conf) as srv:
        cur = srv.connect().cursor()
        previous_max = -1
        for _ in range(TOTAL // BATCH):
            # Checked where the IDs are made; only a summary crosses the wire.
            cur.execute(
                """SELECT count(*), min(i), max(i), bool_and(i > p),
                          extract(epoch FROM snowflake_timestamp(max(i)) - clock_timestamp())::float8
                   FROM (SELECT i, lag(i) OVER () AS p FROM snowflake_nextval_batch(%s) i) s""",
                (BATCH,),
            )
            n, lo, hi, increasing, ahead = cur.fetchone()
            assert n == BATCH
            assert increasing, "a batch was not strictly increasing"
            assert lo > previous_max, "a batch overlapped the one before"
            assert hi < 2**53, f"{hi} does not fit 53 bits"
            # max_lead plus one tick: the tick an ID is in began at most max_lead ahead.
            assert ahead <= 1.001, f"IDs ran {ahead:.3f} s ahead of the clock, more than max_lead"
            previous_max = hi
        waits, errors, borrowed, largest_lead = srv.sql(
            "SELECT waits, errors, ticks_borrowed, extract(epoch FROM largest_lead)::float8 FROM snowflake_id.snowflake_status"
        )[0]
        assert errors == 0
        assert waits > 0, "the layout's capacity was never reached: the test did not test throttling"
        # The furthest any ID's time ran ahead of the clock reading it was taken at.
        assert 0.5 < largest_lead <= 1.0, f"IDs ran {largest_lead:.3f} s ahead of the clock; max_lead is 1 s"
        print(f"{TOTAL} IDs, {waits} waits for the clock, {borrowed} ticks borrowed, furthest ahead {largest_lead:.3f} s")
