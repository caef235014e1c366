//! A libpq client connection, as `dblink` and `postgres_fdw` hold one: the
//! registry is another server, reached with the connection string, password
//! file and service file libpq reads. Only what the registry's three calls
//! need: connect, one statement with text parameters, text results.

use snowflake_id_core::{Class, Failure};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

#[repr(C)]
struct PqConninfoOption {
    keyword: *mut c_char,
    envvar: *mut c_char,
    compiled: *mut c_char,
    val: *mut c_char,
    label: *mut c_char,
    dispchar: *mut c_char,
    dispsize: c_int,
}

#[link(name = "pq")]
unsafe extern "C" {
    fn PQconnectdbParams(
        keywords: *const *const c_char,
        values: *const *const c_char,
        expand_dbname: c_int,
    ) -> *mut c_void;
    fn PQstatus(conn: *const c_void) -> c_int;
    fn PQerrorMessage(conn: *const c_void) -> *const c_char;
    fn PQfinish(conn: *mut c_void);
    fn PQexecParams(
        conn: *mut c_void,
        command: *const c_char,
        n_params: c_int,
        param_types: *const u32,
        param_values: *const *const c_char,
        param_lengths: *const c_int,
        param_formats: *const c_int,
        result_format: c_int,
    ) -> *mut c_void;
    fn PQresultStatus(res: *const c_void) -> c_int;
    fn PQresultErrorField(res: *const c_void, fieldcode: c_int) -> *const c_char;
    fn PQntuples(res: *const c_void) -> c_int;
    fn PQnfields(res: *const c_void) -> c_int;
    fn PQgetvalue(res: *const c_void, row: c_int, col: c_int) -> *const c_char;
    fn PQgetisnull(res: *const c_void, row: c_int, col: c_int) -> c_int;
    fn PQclear(res: *mut c_void);
    fn PQconninfoParse(conninfo: *const c_char, errmsg: *mut *mut c_char) -> *mut PqConninfoOption;
    fn PQconninfoFree(options: *mut PqConninfoOption);
    fn PQfreemem(ptr: *mut c_void);
}

const CONNECTION_OK: c_int = 0;
const PGRES_COMMAND_OK: c_int = 1;
const PGRES_TUPLES_OK: c_int = 2;
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

/// The keywords a connection string sets, or libpq's reason it cannot be
/// read.
pub fn conninfo_keywords(conninfo: &str) -> Result<Vec<(String, String)>, String> {
    let c = CString::new(conninfo).map_err(|_| "it holds a NUL byte".to_string())?;
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string; the options array ends with a NULL
    // keyword, and is freed once read.
    unsafe {
        let opts = PQconninfoParse(c.as_ptr(), &mut err);
        if opts.is_null() {
            let why = text(err).unwrap_or_else(|| "out of memory".into());
            if !err.is_null() {
                PQfreemem(err.cast());
            }
            return Err(why);
        }
        let mut out = Vec::new();
        let mut o = opts;
        while !(*o).keyword.is_null() {
            if let (Some(k), Some(v)) = (text((*o).keyword), text((*o).val)) {
                out.push((k, v));
            }
            o = o.add(1);
        }
        PQconninfoFree(opts);
        Ok(out)
    }
}

/// One open connection, closed when dropped.
pub struct Connection(*mut c_void);

/// A statement's result: its rows, each column's text or NULL.
pub type Rows = Vec<Vec<Option<String>>>;

impl Connection {
    /// Connects with `conninfo` (a connection string or URI), giving up
    /// after `timeout_s` unless the string sets its own `connect_timeout`.
    pub fn open(
        conninfo: &str,
        application_name: &str,
        timeout_s: u32,
    ) -> Result<Connection, String> {
        let timeout = CString::new(timeout_s.to_string()).unwrap_or_default();
        let app = CString::new(application_name).unwrap_or_default();
        let info = CString::new(conninfo)
            .map_err(|_| "the connection string holds a NUL byte".to_string())?;
        // dbname last, expanded: what the string sets overrides the others.
        let keys = [
            c"connect_timeout".as_ptr(),
            c"application_name".as_ptr(),
            c"dbname".as_ptr(),
            std::ptr::null(),
        ];
        let values = [
            timeout.as_ptr(),
            app.as_ptr(),
            info.as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: NULL-terminated arrays of NUL-terminated strings that
        // outlive the call; the connection is freed on every path.
        unsafe {
            let conn = PQconnectdbParams(keys.as_ptr(), values.as_ptr(), 1);
            if conn.is_null() {
                return Err("out of memory".into());
            }
            if PQstatus(conn) != CONNECTION_OK {
                let why = text(PQerrorMessage(conn)).unwrap_or_default();
                PQfinish(conn);
                return Err(why);
            }
            Ok(Connection(conn))
        }
    }

    /// Runs `sql` with text parameters `$1..`; its rows, or the server's
    /// error (its message, SQLSTATE and hint kept, under 55000 here: the
    /// caller could not lease).
    pub fn query(&mut self, sql: &str, params: &[&str]) -> Result<Rows, Failure> {
        let sql = CString::new(sql)
            .map_err(|_| Failure::new(Class::InvalidText, "a statement holds a NUL byte"))?;
        let owned: Vec<CString> = params
            .iter()
            .map(|p| CString::new(*p).unwrap_or_default())
            .collect();
        let ptrs: Vec<*const c_char> = owned.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: `ptrs` holds `params.len()` strings that outlive the
        // call; the result is cleared on every path.
        unsafe {
            let res = PQexecParams(
                self.0,
                sql.as_ptr(),
                ptrs.len() as c_int,
                std::ptr::null(),
                ptrs.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            );
            if res.is_null() {
                return Err(Failure::new(
                    Class::NotReady,
                    text(PQerrorMessage(self.0)).unwrap_or_else(|| "no result".into()),
                ));
            }
            let status = PQresultStatus(res);
            let out = if status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK {
                let (n, m) = (PQntuples(res), PQnfields(res));
                Ok((0..n)
                    .map(|r| {
                        (0..m)
                            .map(|c| {
                                (PQgetisnull(res, r, c) == 0)
                                    .then(|| text(PQgetvalue(res, r, c)).unwrap_or_default())
                            })
                            .collect()
                    })
                    .collect())
            } else {
                let message = text(PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY))
                    .or_else(|| text(PQerrorMessage(self.0)))
                    .unwrap_or_else(|| "the statement failed".into());
                let state = text(PQresultErrorField(res, PG_DIAG_SQLSTATE))
                    .unwrap_or_else(|| "08006".into());
                let mut f = Failure::new(Class::NotReady, format!("{message} (SQLSTATE {state})"));
                if let Some(h) = text(PQresultErrorField(res, PG_DIAG_MESSAGE_HINT)) {
                    f = f.hint(h);
                }
                Err(f)
            };
            PQclear(res);
            out
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the connection opened in `open`, finished once.
        unsafe { PQfinish(self.0) }
    }
}
