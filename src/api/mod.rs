//! Every SQL function of the extension, grouped by concern, and the SQL
//! files they come with (`sql/`). Each is a thin call into the layers
//! below; volatility, strictness and parallel safety are marked on each.

mod admin;
mod backfill;
mod claims;
mod convert;
mod decode;
mod nextval;
mod opaque;
mod registry;
mod status;
mod text_form;
pub mod utility;
mod uuid;
