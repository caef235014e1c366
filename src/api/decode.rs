//! Reading IDs: decode, time part, and the smallest ID of an instant, under
//! this server's layout or under a named one.

use crate::pg::clock::{pg_timestamp, unix_us};
use crate::pg::error::OrRaise;
use crate::pg::process::ProcessLocal;
use crate::pg::row::{finfo_v1, row};
use crate::pg::text::Text;
use crate::settings;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowflake_id_core::layout::{Layout, NAMED};
use snowflake_id_core::timefmt::format_instant;
use snowflake_id_core::Failure;
use std::cell::RefCell;

/// A layout argument, parsed once per distinct text in a row of calls.
pub(super) fn layout_arg(text: &str) -> Layout {
    /// The last layout text seen, and what it parsed to.
    type Parsed = Option<(String, Result<Layout, Failure>)>;
    static LAST: ProcessLocal<RefCell<Parsed>> = ProcessLocal(RefCell::new(None));
    let parsed = {
        let mut last = LAST.0.borrow_mut();
        if last.as_ref().is_none_or(|(t, _)| t != text) {
            *last = Some((text.to_string(), Layout::from_argument(text)));
        }
        last.as_ref().map(|(_, l)| l.clone())
    };
    // Raised after the borrow ends: the error leaves this frame by longjmp.
    parsed.expect("just stored").or_raise()
}

fn server_layout() -> &'static Layout {
    settings::server_layout().or_raise()
}

fn timestamp(unix_ms: i64) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(pg_timestamp(unix_ms)).unwrap_or_else(|_| {
        error!(
            "snowflake_id: {} is outside the timestamptz range",
            format_instant(unix_ms)
        )
    })
}

/// # Safety
/// `fcinfo` is a call of one of the `snowflake_decode` functions below,
/// whose first argument is a bigint and whose OUT columns are these.
unsafe fn decode_row(fcinfo: pg_sys::FunctionCallInfo, layout: &Layout) -> pg_sys::Datum {
    // SAFETY: see above; the worker and sequence fit their integer columns.
    unsafe {
        let id = pg_sys::Datum::value(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0)) as i64;
        let d = layout.decode(id).or_raise();
        row(
            fcinfo,
            &[
                ("ts", Some(pg_sys::Datum::from(pg_timestamp(d.unix_ms)))),
                ("worker_id", Some(pg_sys::Datum::from(d.worker))),
                ("sequence", Some(pg_sys::Datum::from(d.sequence))),
            ],
        )
    }
}

finfo_v1!(pg_finfo_snowflake_decode_server);
/// `snowflake_decode(id)`: the parts of an ID under this server's layout.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowflake_decode_server(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the call Postgres makes of this function, declared below.
    unsafe { decode_row(fcinfo, server_layout()) }
}

finfo_v1!(pg_finfo_snowflake_decode_layout);
/// `snowflake_decode(id, layout)`: the parts of an ID under a named layout.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowflake_decode_layout(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the call Postgres makes of this function, declared below; its
    // second argument is a text.
    unsafe {
        let text: Text =
            pgrx::fcinfo::pg_getarg(fcinfo, 1).unwrap_or_else(|| error!("layout must not be null"));
        let layout = layout_arg(text.as_str());
        decode_row(fcinfo, &layout)
    }
}

extension_sql!(
    r#"
-- The parts of an ID under this server's layout. STABLE: the layout is fixed
-- while the server runs, but a restart with other settings changes it.
CREATE FUNCTION snowflake_decode(id bigint, OUT ts timestamptz, OUT worker_id integer, OUT sequence integer)
RETURNS record STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_decode_server';

-- The parts of an ID under a named layout (or a custom one that names its
-- epoch). IMMUTABLE: a named layout never changes.
CREATE FUNCTION snowflake_decode(id bigint, layout text, OUT ts timestamptz, OUT worker_id integer, OUT sequence integer)
RETURNS record IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_decode_layout';
"#,
    name = "snowflake_decode"
);

/// The time part of an ID under this server's layout.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp(server_layout().decode(id).or_raise().unix_ms)
}

/// The time part of an ID under a named layout.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_timestamp")]
fn snowflake_timestamp_in(id: i64, layout: Text) -> TimestampWithTimeZone {
    timestamp(layout_arg(layout.as_str()).decode(id).or_raise().unix_ms)
}

/// The smallest ID any worker can issue at `ts`, under this server's layout:
/// `id >= snowflake_from_timestamp(t)` selects the IDs issued at or after
/// `t`'s tick, and can use the primary-key index.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    server_layout().lower_bound(unix_us(ts.into())).or_raise()
}

/// The smallest ID any worker can issue at `ts`, under a named layout.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_from_timestamp")]
fn snowflake_from_timestamp_in(ts: TimestampWithTimeZone, layout: Text) -> i64 {
    layout_arg(layout.as_str())
        .lower_bound(unix_us(ts.into()))
        .or_raise()
}

/// Every named layout with its epoch and field widths.
#[allow(clippy::type_complexity)] // the column list is the SQL signature
#[pg_extern(immutable, parallel_safe)]
fn snowflake_layouts() -> TableIterator<
    'static,
    (
        name!(name, String),
        name!(epoch, TimestampWithTimeZone),
        name!(unit, String),
        name!(time_bits, i32),
        name!(worker_bits, i32),
        name!(sequence_bits, i32),
        name!(field_order, String),
        name!(ends, TimestampWithTimeZone),
    ),
> {
    TableIterator::new(NAMED.iter().map(|l| {
        let order = if l.spec().contains("order=") {
            "time, sequence, worker"
        } else {
            "time, worker, sequence"
        };
        let unit = if l.unit_ms() % 1000 == 0 {
            format!("{} s", l.unit_ms() / 1000)
        } else {
            format!("{} ms", l.unit_ms())
        };
        (
            l.name().unwrap_or_default().to_string(),
            timestamp(l.epoch_ms()),
            unit,
            l.time_bits() as i32,
            l.worker_bits() as i32,
            l.sequence_bits() as i32,
            order.to_string(),
            timestamp(l.end_ms()),
        )
    }))
}
