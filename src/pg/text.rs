//! `text` values and SQL identifiers, in every database encoding (see
//! `charset`): the `Text` argument and result type the SQL functions take,
//! and identifiers quoted so that they read the same in any encoding.

use super::charset::{from_server, server_encoding, sql_ascii, to_server, utf8};
use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// A `text` argument or result column, as UTF-8 whatever the database's
/// encoding (see `from_server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(pub String);

impl Text {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromDatum for Text {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        typoid: pg_sys::Oid,
    ) -> Option<Text> {
        // SAFETY: the same datum, read in place, then copied out here.
        let raw = unsafe { CallText::from_polymorphic_datum(datum, is_null, typoid) }?;
        Some(Text(
            from_server(raw.bytes()).unwrap_or_else(|f| super::error::raise(f)),
        ))
    }
}

impl IntoDatum for Text {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let bytes = to_server(&self.0);
        let len = i32::try_from(bytes.len()).ok()?;
        // SAFETY: copies the bytes into a new text value in the current
        // memory context.
        let text = unsafe { pg_sys::cstring_to_text_with_len(bytes.as_ptr().cast(), len) };
        Some(pg_sys::Datum::from(text))
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }

    fn is_compatible_with(other: pg_sys::Oid) -> bool {
        other == pg_sys::TEXTOID || other == pg_sys::VARCHAROID
    }
}

/// A `text` argument type, unboxed the way pgrx unboxes its own text
/// arguments: through FromDatum, from a datum Postgres declared `text`.
macro_rules! text_argument {
    ($t:ty) => {
        // SAFETY: see the macro.
        unsafe impl<'fcx> ArgAbi<'fcx> for $t {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                // SAFETY: the argument is a text datum (see the macro).
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }

            unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
                // SAFETY: the argument is a text datum (see the macro).
                unsafe { arg.unbox_arg_using_from_datum::<$t>() }.into()
            }
        }
    };
}

text_argument!(Text);

// SAFETY: returned the way pgrx returns its own text, through IntoDatum.
unsafe impl BoxRet for Text {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: a text datum, made in the call's memory context.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

pgrx::impl_sql_translatable!(Text, "text");

/// A `text` argument read in place, as the bytes the database holds (in
/// its encoding), for arguments only ASCII can make valid: no conversion,
/// no copy. Valid for the call that received it (the bytes live in its
/// memory context, detoasted there if they had to be).
pub struct CallText {
    ptr: *const u8,
    len: usize,
}

impl CallText {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a slice of the argument's detoasted datum, which lives
        // as long as the call this value was made for.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl FromDatum for CallText {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<CallText> {
        if is_null || datum.is_null() {
            return None;
        }
        // SAFETY: a text (or varchar) datum, detoasted in the call's memory
        // context and read as bytes.
        let bytes = unsafe {
            let v = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            pgrx::varlena::varlena_to_byte_slice(v)
        };
        Some(CallText {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        })
    }
}

text_argument!(CallText);

pgrx::impl_sql_translatable!(CallText, "text");

/// `name` quoted as an SQL identifier that reads the same in every
/// database encoding: Postgres's own quoting where the database is UTF-8
/// or SQL_ASCII (whose bytes pass through as they are) or the name is
/// ASCII, else a Unicode-escaped identifier (`U&"d\00E9j\00E0"`), which is
/// ASCII itself and means the name's characters whatever the encoding.
pub fn ident(name: &str) -> String {
    let enc = server_encoding();
    if name.is_ascii() || enc == utf8() || enc == sql_ascii() {
        let c = std::ffi::CString::new(name).unwrap_or_default();
        // SAFETY: quote_identifier returns its argument or a palloc'd
        // copy, valid in this memory context; copied out at once.
        return unsafe { CStr::from_ptr(pg_sys::quote_identifier(c.as_ptr())) }
            .to_string_lossy()
            .into_owned();
    }
    let mut out = String::from("U&\"");
    for c in name.chars() {
        match c {
            '"' => out.push_str("\"\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\+{:06X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}
