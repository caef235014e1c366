//! Reading and writing instants as text without a time-zone database.
//!
//! Settings are read in the postmaster before any Postgres date machinery is
//! safe to call, so epochs are parsed here. Only forms with an explicit UTC
//! offset (or a plain count of milliseconds since 1970) are accepted: an epoch
//! silently read in some local zone would shift every ID ever decoded.

/// Milliseconds since 1970-01-01 00:00:00 UTC.
pub type UnixMs = i64;

const MS_PER_DAY: i64 = 86_400_000;

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// A small cursor over ASCII text.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn digits(&mut self, n: usize) -> Option<u32> {
        let end = self.at + n;
        let part = self.s.get(self.at..end)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at = end;
        Some(part.iter().fold(0, |acc, c| acc * 10 + u32::from(c - b'0')))
    }

    fn rest(&self) -> &[u8] {
        &self.s[self.at..]
    }
}

const FORM: &str = "expected 'YYYY-MM-DD HH:MM:SS[.fff]+HH[:MM]' (an explicit UTC offset such as +00 or Z is required) or whole milliseconds since 1970-01-01 UTC";

/// Parses an instant written with an explicit UTC offset, or as an integer
/// count of milliseconds since the Unix epoch.
pub fn parse_instant(text: &str) -> Result<UnixMs, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("the value is empty: {FORM}"));
    }
    if t.bytes().all(|c| c.is_ascii_digit())
        || (t.starts_with('-') && t.len() > 1 && t[1..].bytes().all(|c| c.is_ascii_digit()))
    {
        return t
            .parse::<i64>()
            .map_err(|_| format!("'{t}' does not fit in 64 bits"));
    }
    let mut c = Cursor {
        s: t.as_bytes(),
        at: 0,
    };
    let bad = || format!("'{t}' is not a timestamp: {FORM}");
    let year = c.digits(4).ok_or_else(bad)? as i64;
    if !c.eat(b'-') {
        return Err(bad());
    }
    let month = c.digits(2).ok_or_else(bad)?;
    if !c.eat(b'-') {
        return Err(bad());
    }
    let day = c.digits(2).ok_or_else(bad)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(format!("'{t}' is not a valid calendar date"));
    }
    let (mut hour, mut minute, mut second, mut micros) = (0u32, 0u32, 0u32, 0u32);
    if c.eat(b' ') || c.eat(b'T') || c.eat(b't') {
        hour = c.digits(2).ok_or_else(bad)?;
        if !c.eat(b':') {
            return Err(bad());
        }
        minute = c.digits(2).ok_or_else(bad)?;
        if c.eat(b':') {
            second = c.digits(2).ok_or_else(bad)?;
            if c.eat(b'.') {
                let mut scale = 100_000;
                let mut any = false;
                while let Some(d) = c.peek().filter(u8::is_ascii_digit) {
                    c.at += 1;
                    any = true;
                    micros += u32::from(d - b'0') * scale;
                    scale /= 10;
                }
                if !any {
                    return Err(bad());
                }
            }
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err(format!("'{t}' has an invalid time of day"));
        }
    }
    let rest = std::str::from_utf8(c.rest()).unwrap_or("").trim_start();
    let offset_minutes: i64 = match rest {
        "" => {
            return Err(format!(
                "'{t}' has no UTC offset: write it with one, e.g. '{t}+00'"
            ))
        }
        "Z" | "z" | "UTC" | "utc" | "+00" | "-00" | "+00:00" | "-00:00" | "+0000" => 0,
        _ => {
            let mut o = Cursor {
                s: rest.as_bytes(),
                at: 0,
            };
            let sign = if o.eat(b'+') {
                1
            } else if o.eat(b'-') {
                -1
            } else {
                return Err(bad());
            };
            let oh = o.digits(2).ok_or_else(bad)?;
            o.eat(b':');
            let om = if o.rest().is_empty() {
                0
            } else {
                o.digits(2).ok_or_else(bad)?
            };
            if !o.rest().is_empty() || oh > 15 || om > 59 {
                return Err(bad());
            }
            sign * (i64::from(oh) * 60 + i64::from(om))
        }
    };
    if micros % 1000 != 0 {
        return Err(format!("'{t}' is more precise than a millisecond"));
    }
    let days = days_from_civil(year, month, day);
    let ms = days * MS_PER_DAY
        + i64::from(hour) * 3_600_000
        + i64::from(minute) * 60_000
        + i64::from(second) * 1000
        + i64::from(micros / 1000)
        - offset_minutes * 60_000;
    Ok(ms)
}

/// Writes an instant as `YYYY-MM-DD HH:MM:SS[.fff]+00`, the form Postgres
/// prints a timestamptz in under `TimeZone = UTC`.
pub fn format_instant(ms: UnixMs) -> String {
    let days = ms.div_euclid(MS_PER_DAY);
    let in_day = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, frac) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    // Years before 1 as Postgres writes them: 0 is 1 BC.
    let (y, era) = if y <= 0 { (1 - y, " BC") } else { (y, "") };
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}+00{era}")
    } else {
        format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{frac:03}+00{era}")
    }
}

/// A length of time for people: "850 ms", "59.9 s", "2 h 5 min", "3 days 4 h".
pub fn format_duration(ms: u64) -> String {
    const S: u64 = 1000;
    const MIN: u64 = 60 * S;
    const H: u64 = 60 * MIN;
    const DAY: u64 = 24 * H;
    const YEAR: u64 = 365 * DAY;
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / MIN, ms % MIN / S),
        3_600_000..86_400_000 => format!("{} h {} min", ms / H, ms % H / MIN),
        86_400_000..31_536_000_000 => format!("{} days {} h", ms / DAY, ms % DAY / H),
        _ => format!("{:.1} years", ms as f64 / YEAR as f64),
    }
}

/// A length of time as a Postgres interval literal that `SET` accepts for a
/// setting measured in milliseconds, rounded up to whole seconds or minutes
/// so a hint never suggests a value that is still too small.
pub fn setting_value_at_least(ms: u64) -> String {
    if ms <= 1000 {
        return format!("{ms}ms");
    }
    let s = ms.div_ceil(1000);
    if s < 600 {
        format!("{s}s")
    } else if s < 2 * 86_400 {
        format!("{}min", s.div_ceil(60))
    } else {
        format!("{}d", s.div_ceil(86_400))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_epochs() {
        assert_eq!(
            parse_instant("2025-01-01 00:00:00+00"),
            Ok(1_735_689_600_000)
        );
        assert_eq!(parse_instant("2025-01-01T00:00:00Z"), Ok(1_735_689_600_000));
        assert_eq!(
            parse_instant("2014-09-01 00:00:00 UTC"),
            Ok(1_409_529_600_000)
        );
        assert_eq!(parse_instant("2016-05-20 00:00+00"), Ok(1_463_702_400_000));
        assert_eq!(parse_instant("1288834974657"), Ok(1_288_834_974_657));
        assert_eq!(
            parse_instant("2010-11-04 01:42:54.657+00"),
            Ok(1_288_834_974_657)
        );
        assert_eq!(
            parse_instant("2025-01-01 09:00:00+09:00"),
            Ok(1_735_689_600_000)
        );
        assert_eq!(
            parse_instant("2024-12-31 19:00:00-05"),
            Ok(1_735_689_600_000)
        );
        assert_eq!(
            parse_instant("2025-01-01 05:30:00+0530"),
            Ok(1_735_689_600_000)
        );
    }

    #[test]
    fn rejects_what_it_cannot_pin_down() {
        assert!(parse_instant("2025-01-01 00:00:00")
            .unwrap_err()
            .contains("no UTC offset"));
        assert!(parse_instant("2025-01-01")
            .unwrap_err()
            .contains("no UTC offset"));
        assert!(parse_instant("2025-02-30 00:00:00+00")
            .unwrap_err()
            .contains("calendar"));
        assert!(parse_instant("2025-01-01 24:00:00+00")
            .unwrap_err()
            .contains("time of day"));
        assert!(parse_instant("yesterday")
            .unwrap_err()
            .contains("not a timestamp"));
        assert!(parse_instant("").unwrap_err().contains("empty"));
        assert!(parse_instant("2025-01-01 00:00:00.0001+00")
            .unwrap_err()
            .contains("millisecond"));
        assert!(parse_instant("2025-01-01 00:00:00+99").is_err());
    }

    #[test]
    fn format_round_trips() {
        for ms in [
            0,
            1_735_689_600_000,
            1_288_834_974_657,
            -1,
            253_402_300_799_999,
            -62_135_596_800_000,
        ] {
            assert_eq!(parse_instant(&format_instant(ms)), Ok(ms), "{ms}");
        }
        assert_eq!(format_instant(1_735_689_600_000), "2025-01-01 00:00:00+00");
        assert_eq!(
            format_instant(-210_866_803_200_000),
            "4714-11-24 00:00:00+00 BC"
        );
        assert_eq!(
            format_instant(1_288_834_974_657),
            "2010-11-04 01:42:54.657+00"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(format_duration(850), "850 ms");
        assert_eq!(format_duration(59_900), "59.9 s");
        assert_eq!(format_duration(3_725_000), "1 h 2 min");
        assert_eq!(setting_value_at_least(60_001), "61s");
        assert_eq!(setting_value_at_least(3_600_000), "60min");
        assert_eq!(setting_value_at_least(3_600_001), "61min");
        assert_eq!(setting_value_at_least(172_800_000), "2d");
        assert_eq!(setting_value_at_least(40 * 86_400_000 + 1000), "41d");
    }
}
