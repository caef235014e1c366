//! A libpq client connection, as `dblink` and `postgres_fdw` hold one: the
//! registry is another server, reached with the connection string, password
//! file and service file libpq reads. Only what the registry's calls need:
//! connect, one statement with text parameters, a short text answer; each
//! wait bounded and interruptible (libpq's asynchronous calls on the latch,
//! as Postgres's own libpq users wait).

use snowflake_id_core::{Class, Failure};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

// The server's own libpq, as its WAL receiver loads it, found when first
// needed in the process that needs it: never linked into this library,
// which the postmaster preloads. A libpq linked here would be the one every
// later process of the server resolves `libpq.so.5` to, the WAL receiver's
// and postgres_fdw's included, whatever version they were built against.
macro_rules! libpq_api {
    ($($field:ident = $symbol:literal: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        struct Api {
            $($field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Api {
            /// # Safety
            /// `handle` must be libpq's, from `dlopen`.
            unsafe fn from(handle: *mut c_void) -> Result<Api, String> {
                Ok(Api {
                    $($field: {
                        // SAFETY: a NUL-terminated name looked up in libpq's handle.
                        let p = unsafe { dlsym(handle, concat!($symbol, "\0").as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("libpq has no {}", $symbol));
                        }
                        // SAFETY: the symbol is libpq's function of this
                        // signature (libpq-fe.h, unchanged since 9.x).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    },)*
                })
            }
        }
    };
}

libpq_api! {
    connect_start_params = "PQconnectStartParams": fn(*const *const c_char, *const *const c_char, c_int) -> *mut c_void;
    connect_poll = "PQconnectPoll": fn(*mut c_void) -> c_int;
    socket = "PQsocket": fn(*const c_void) -> c_int;
    send_query_params = "PQsendQueryParams": fn(*mut c_void, *const c_char, c_int, *const u32, *const *const c_char, *const c_int, *const c_int, c_int) -> c_int;
    set_single_row_mode = "PQsetSingleRowMode": fn(*mut c_void) -> c_int;
    consume_input = "PQconsumeInput": fn(*mut c_void) -> c_int;
    is_busy = "PQisBusy": fn(*mut c_void) -> c_int;
    get_result = "PQgetResult": fn(*mut c_void) -> *mut c_void;
    get_length = "PQgetlength": fn(*const c_void, c_int, c_int) -> c_int;
    set_notice_processor = "PQsetNoticeProcessor": fn(*mut c_void, Option<unsafe extern "C" fn(*mut c_void, *const c_char)>, *mut c_void) -> *mut c_void;
    status = "PQstatus": fn(*const c_void) -> c_int;
    error_message = "PQerrorMessage": fn(*const c_void) -> *const c_char;
    finish = "PQfinish": fn(*mut c_void);
    result_status = "PQresultStatus": fn(*const c_void) -> c_int;
    result_error_field = "PQresultErrorField": fn(*const c_void, c_int) -> *const c_char;
    nfields = "PQnfields": fn(*const c_void) -> c_int;
    get_value = "PQgetvalue": fn(*const c_void, c_int, c_int) -> *const c_char;
    get_is_null = "PQgetisnull": fn(*const c_void, c_int, c_int) -> c_int;
    clear = "PQclear": fn(*mut c_void);
}

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

/// libpq's functions in this process, loaded at the first call.
fn api() -> Result<&'static Api, Failure> {
    static API: std::sync::OnceLock<Result<Api, String>> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: load_file loads the server's own library (ERROR if it
        // cannot: then the caller's call fails); the RTLD_NOLOAD dlopen
        // hands back the libpq that library brought, by its soname.
        unsafe {
            pgrx::pg_sys::load_file(c"libpqwalreceiver".as_ptr(), false);
            let handle = dlopen(c"libpq.so.5".as_ptr(), RTLD_NOW | RTLD_NOLOAD);
            if handle.is_null() {
                return Err(text(dlerror()).unwrap_or_else(|| "libpq.so.5 is not loaded".into()));
            }
            Api::from(handle)
        }
    })
    .as_ref()
    .map_err(|why| {
        Failure::new(
            Class::NotReady,
            format!("this server's libpq cannot be used: {why}"),
        )
    })
}

const CONNECTION_OK: c_int = 0;
const CONNECTION_BAD: c_int = 1;
const PGRES_COMMAND_OK: c_int = 1;
const PGRES_TUPLES_OK: c_int = 2;
const PGRES_SINGLE_TUPLE: c_int = 9;
const PGRES_NONFATAL_ERROR: c_int = 6;
const PGRES_FATAL_ERROR: c_int = 7;
const PGRES_POLLING_FAILED: c_int = 0;
const PGRES_POLLING_READING: c_int = 1;
const PGRES_POLLING_OK: c_int = 3;
/// Before the first poll: libpq's documentation says to act as if the
/// last poll asked to write.
const PGRES_POLLING_WRITING_FIRST: c_int = 2;
/// Rows and bytes per value taken from an answer: the registry's answers
/// are one short row; anything more is not read (a hostile server's
/// answer costs no memory).
const MAX_ROWS: usize = 4;
const MAX_VALUE_BYTES: c_int = 256;
const PG_DIAG_SQLSTATE: c_int = b'C' as c_int;
const PG_DIAG_MESSAGE_PRIMARY: c_int = b'M' as c_int;
const PG_DIAG_MESSAGE_HINT: c_int = b'H' as c_int;

fn text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| {
        // SAFETY: libpq hands back NUL-terminated strings or NULL.
        unsafe { CStr::from_ptr(p) }
            .to_string_lossy()
            .trim_end()
            .to_string()
    })
}

/// One open connection, closed when dropped. Every wait on it is on the
/// process's latch and the socket, bounded, and ends at an interrupt
/// (a cancel, a statement timeout, a SIGTERM): nothing here blocks.
pub struct Connection(*mut c_void, &'static Api);

/// A statement's result: its rows, each column's text or NULL.
pub type Rows = Vec<Vec<Option<String>>>;

/// Registry NOTICEs are not the server log's business.
unsafe extern "C" fn ignore_notice(_arg: *mut c_void, _message: *const c_char) {}

/// Waits until `sock` is readable (or writable), the latch is set, or
/// `deadline_ms` passes; an interrupt raises (a backend's cancel) or ends
/// the wait (a worker's SIGTERM). Ok(whether the socket is ready); Err: the
/// deadline passed, or a stop.
fn wait_socket(sock: c_int, write: bool, deadline_ms: i64, what: &str) -> Result<bool, String> {
    use pgrx::pg_sys;
    let left = deadline_ms - crate::pg::clock::now_ms();
    if left <= 0 {
        return Err(format!("no answer within the time allowed while {what}"));
    }
    let socket = if write {
        pg_sys::WL_SOCKET_WRITEABLE
    } else {
        pg_sys::WL_SOCKET_READABLE
    };
    let events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH | socket;
    // SAFETY: waiting on this process's own latch and a socket libpq owns,
    // as postgres_fdw and the WAL receiver do.
    let woke = unsafe {
        let woke = pg_sys::WaitLatchOrSocket(
            pg_sys::MyLatch,
            events as i32,
            sock as _,
            left.min(i32::MAX as i64) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        woke
    };
    pgrx::check_for_interrupts!();
    if crate::pg::signals::terminating() {
        return Err(format!("stopped while {what}"));
    }
    Ok(woke & socket as i32 != 0)
}

impl Connection {
    /// Connects with `conninfo` (a connection string or URI) within
    /// `timeout_s`; TCP keepalives and a user timeout are on unless the
    /// string says otherwise, so that a registry gone silent is noticed.
    pub fn open(
        conninfo: &str,
        application_name: &str,
        timeout_s: u32,
    ) -> Result<Connection, String> {
        let deadline = crate::pg::clock::now_ms() + i64::from(timeout_s) * 1000;
        let info = CString::new(conninfo)
            .map_err(|_| "the connection string holds a NUL byte".to_string())?;
        let app = CString::new(application_name).unwrap_or_default();
        // dbname last, expanded: what the string sets overrides the others.
        let keys = [
            c"application_name".as_ptr(),
            c"keepalives_idle".as_ptr(),
            c"keepalives_interval".as_ptr(),
            c"keepalives_count".as_ptr(),
            c"tcp_user_timeout".as_ptr(),
            c"options".as_ptr(),
            c"dbname".as_ptr(),
            std::ptr::null(),
        ];
        let values = [
            app.as_ptr(),
            c"10".as_ptr(),
            c"5".as_ptr(),
            c"3".as_ptr(),
            c"30000".as_ptr(),
            // A function's SET clause does not bound the statement already
            // running, and a lease must be durable where it is answered.
            c"-c statement_timeout=10s -c synchronous_commit=on".as_ptr(),
            info.as_ptr(),
            std::ptr::null(),
        ];
        let pq = api().map_err(|f| f.message)?;
        // SAFETY: NULL-terminated arrays of NUL-terminated strings that
        // outlive the call; the connection is owned (and finished) by the
        // value made of it at once.
        let conn = Connection(
            unsafe { (pq.connect_start_params)(keys.as_ptr(), values.as_ptr(), 1) },
            pq,
        );
        if conn.0.is_null() {
            return Err("out of memory".into());
        }
        // SAFETY: the connection made above, polled as libpq's documentation
        // says: wait for what the last poll asked, then poll again.
        unsafe {
            (pq.set_notice_processor)(conn.0, Some(ignore_notice), std::ptr::null_mut());
            // A start that failed at once (no socket) has failed already.
            let mut polled = if (pq.status)(conn.0) == CONNECTION_BAD {
                PGRES_POLLING_FAILED
            } else {
                PGRES_POLLING_WRITING_FIRST
            };
            loop {
                let sock = (pq.socket)(conn.0);
                match polled {
                    PGRES_POLLING_OK => break,
                    PGRES_POLLING_FAILED => {
                        return Err(text((pq.error_message)(conn.0)).unwrap_or_default())
                    }
                    _ if sock < 0 => {
                        return Err(text((pq.error_message)(conn.0))
                            .filter(|t| !t.is_empty())
                            .unwrap_or_else(|| "no connection".into()))
                    }
                    asked => {
                        // libpq is polled only when the socket is ready: a
                        // latch set meanwhile (a reload) would otherwise
                        // make it take a connect under way for done.
                        if !wait_socket(
                            sock,
                            asked != PGRES_POLLING_READING,
                            deadline,
                            "connecting",
                        )? {
                            continue;
                        }
                    }
                }
                polled = (pq.connect_poll)(conn.0);
            }
            if (pq.status)(conn.0) != CONNECTION_OK {
                return Err(text((pq.error_message)(conn.0)).unwrap_or_default());
            }
        }
        Ok(conn)
    }

    /// Runs `sql` with text parameters `$1..` within `timeout_s`; its first
    /// rows (a few, each value a few hundred bytes at most), or the
    /// server's error (its message, SQLSTATE and hint kept, under 55000
    /// here: the caller could not do what it asked).
    pub fn query(&mut self, sql: &str, params: &[&str], timeout_s: u32) -> Result<Rows, Failure> {
        let failed = |why: String| Failure::new(Class::NotReady, why);
        let pq = self.1;
        let deadline = crate::pg::clock::now_ms() + i64::from(timeout_s) * 1000;
        let sql = CString::new(sql)
            .map_err(|_| Failure::new(Class::InvalidText, "a statement holds a NUL byte"))?;
        let owned: Vec<CString> = params
            .iter()
            .map(|p| CString::new(*p).unwrap_or_default())
            .collect();
        let ptrs: Vec<*const c_char> = owned.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: `ptrs` holds `params.len()` strings that outlive the
        // call; results are cleared as soon as they are read.
        unsafe {
            let sent = (pq.send_query_params)(
                self.0,
                sql.as_ptr(),
                ptrs.len() as c_int,
                std::ptr::null(),
                ptrs.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            );
            if sent == 0 || (pq.set_single_row_mode)(self.0) == 0 {
                return Err(failed(text((pq.error_message)(self.0)).unwrap_or_default()));
            }
            let mut rows: Rows = Vec::new();
            let mut error: Option<Failure> = None;
            loop {
                // Every turn: the deadline and interrupts, whatever the
                // server sends.
                if crate::pg::clock::now_ms() > deadline {
                    return Err(failed("no whole answer within the time allowed".into()));
                }
                pgrx::check_for_interrupts!();
                while (pq.is_busy)(self.0) != 0 {
                    let sock = (pq.socket)(self.0);
                    if sock < 0 {
                        return Err(failed("the connection to the registry was lost".into()));
                    }
                    let _ready = wait_socket(sock, false, deadline, "waiting for the answer")
                        .map_err(failed)?;
                    if (pq.consume_input)(self.0) == 0 {
                        return Err(failed(text((pq.error_message)(self.0)).unwrap_or_default()));
                    }
                }
                let res = (pq.get_result)(self.0);
                if res.is_null() {
                    break;
                }
                match (pq.result_status)(res) {
                    PGRES_SINGLE_TUPLE if rows.len() >= MAX_ROWS => {
                        (pq.clear)(res);
                        // Not read further: the connection is dropped.
                        return Err(failed(format!("the answer has more than {MAX_ROWS} rows")));
                    }
                    PGRES_SINGLE_TUPLE => {
                        let row = (0..(pq.nfields)(res).min(16))
                            .map(|c| {
                                if (pq.get_is_null)(res, 0, c) != 0 {
                                    Ok(None)
                                } else if (pq.get_length)(res, 0, c) > MAX_VALUE_BYTES {
                                    Err(failed(format!("a value of the answer is longer than {MAX_VALUE_BYTES} bytes")))
                                } else {
                                    Ok(Some(text((pq.get_value)(res, 0, c)).unwrap_or_default()))
                                }
                            })
                            .collect::<Result<Vec<_>, Failure>>();
                        (pq.clear)(res);
                        rows.push(row?);
                    }
                    PGRES_TUPLES_OK | PGRES_COMMAND_OK => (pq.clear)(res),
                    PGRES_FATAL_ERROR | PGRES_NONFATAL_ERROR => {
                        let message = text((pq.result_error_field)(res, PG_DIAG_MESSAGE_PRIMARY))
                            .or_else(|| text((pq.error_message)(self.0)))
                            .unwrap_or_else(|| "the statement failed".into());
                        let state = text((pq.result_error_field)(res, PG_DIAG_SQLSTATE))
                            .unwrap_or_else(|| "08006".into());
                        let mut f = failed(format!("{} (SQLSTATE {state})", cut(&message)));
                        if let Some(h) = text((pq.result_error_field)(res, PG_DIAG_MESSAGE_HINT)) {
                            f = f.hint(cut(&h));
                        }
                        (pq.clear)(res);
                        error.get_or_insert(f);
                    }
                    other => {
                        // COPY and the like: no answer of a registry's, and
                        // one that would never end. The connection is dropped.
                        (pq.clear)(res);
                        return Err(failed(format!(
                            "the registry answered with result status {other}, not rows"
                        )));
                    }
                }
            }
            error.map_or(Ok(rows), Err)
        }
    }
}

/// A registry's message, cut to a length the status can show.
fn cut(text: &str) -> String {
    text.chars().take(300).collect()
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the connection opened in `open`, finished once.
        unsafe { (self.1.finish)(self.0) }
    }
}
