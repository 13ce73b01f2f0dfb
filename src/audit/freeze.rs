//! The freeze ledger `.fixgate/freeze.json`: quarantined tests with an owner and an expiry, parsed
//! from bytes with messages that name the line, the entry and the fix; plus the calendar dates it
//! needs.
//!
//! The ledger is read from the base, so a patch cannot quarantine its own failures; [`added_by`]
//! lists what a patch adds or extends so that the report can show it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::civil;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Serialize, Serializer};

/// Where the ledger lives, relative to the repository root.
pub(crate) const FILE_NAME: &str = ".fixgate/freeze.json";

/// How long a suggested freeze lasts: long enough to fix a test, short enough to be noticed.
pub(crate) const DEFAULT_FREEZE_DAYS: i64 = 14;

/// The owner of a suggested entry when nobody is known; a placeholder that still parses, so a
/// pasted suggestion works, and that reads as a to-do in review.
pub(crate) const UNASSIGNED_OWNER: &str = "unassigned";

// ---------------------------------------------------------------------------------------------
// Dates
// ---------------------------------------------------------------------------------------------

/// A proleptic Gregorian calendar date between 0000-01-01 and 9999-12-31, written `YYYY-MM-DD`
/// (the calendar is jiff's; the ledger's rule is the four-digit year and the one way to write it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Date(civil::Date);

/// A string that is not a date.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DateError {
    #[error("{0:?} is not a date written as YYYY-MM-DD")]
    Format(String),
    #[error("{0:?} is not a calendar date")]
    Calendar(String),
}

impl Date {
    pub(crate) const MIN: Date = Date(civil::date(0, 1, 1));
    #[cfg(test)]
    pub(crate) const MAX: Date = Date(civil::Date::MAX);

    /// The date of a calendar day, kept within the ledger's range (the clock is read by the
    /// caller: judgments read none).
    pub(crate) fn from_civil(day: civil::Date) -> Date {
        Date(day).max(Date::MIN)
    }

    #[cfg(test)]
    pub(crate) fn year(self) -> i16 {
        self.0.year()
    }

    #[cfg(test)]
    pub(crate) fn month(self) -> i8 {
        self.0.month()
    }

    #[cfg(test)]
    pub(crate) fn day(self) -> i8 {
        self.0.day()
    }

    /// Parses exactly `YYYY-MM-DD` (ASCII digits, zero-padded), and only real dates.
    pub(crate) fn parse(s: &str) -> Result<Date, DateError> {
        let b = s.as_bytes();
        let shape_ok = b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
        if !shape_ok {
            return Err(DateError::Format(s.to_owned()));
        }
        // The shape makes each field digits: four for the year, two for the month and the day.
        let field = |range: std::ops::Range<usize>| s[range].parse::<i16>().unwrap_or_default();
        let (year, month, day) = (field(0..4), field(5..7) as i8, field(8..10) as i8);
        civil::Date::new(year, month, day)
            .map(Date)
            .map_err(|_| DateError::Calendar(s.to_owned()))
    }

    /// The date `n` days later (earlier when negative), saturating at 0000-01-01 and
    /// 9999-12-31.
    pub(crate) fn plus_days(self, n: i64) -> Date {
        let days = jiff::SignedDuration::from_secs(n.saturating_mul(86_400));
        Date(self.0.saturating_add(days)).max(Date::MIN)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // jiff writes a year of 0..=9999 in four digits: YYYY-MM-DD.
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Date {
    type Err = DateError;

    fn from_str(s: &str) -> Result<Date, DateError> {
        Date::parse(s)
    }
}

impl Serialize for Date {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// ---------------------------------------------------------------------------------------------
// The ledger
// ---------------------------------------------------------------------------------------------

/// One frozen test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Entry {
    pub(crate) frozen_on: Date,
    pub(crate) expires: Date,
    pub(crate) owner: String,
    pub(crate) reason: String,
}

impl Entry {
    /// Expired once the expiry day has passed: an entry is still good on its `expires` day.
    pub(crate) fn is_expired(&self, today: Date) -> bool {
        today > self.expires
    }
}

/// The parsed ledger: nodeid → entry, sorted by nodeid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ledger {
    entries: BTreeMap<String, Entry>,
    warnings: Vec<String>,
}

impl Ledger {
    pub(crate) fn get(&self, nodeid: &str) -> Option<&Entry> {
        self.entries.get(nodeid)
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, nodeid: &str) -> bool {
        self.entries.contains_key(nodeid)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds or replaces an entry (the `freeze` command, or a test building a ledger).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, nodeid: impl Into<String>, entry: Entry) {
        self.entries.insert(nodeid.into(), entry);
    }

    /// Problems that do not stop the audit (unknown fields), each a full message.
    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Entries past their expiry day, sorted by nodeid: each is a hard error (exit 5).
    pub(crate) fn expired(&self, today: Date) -> Vec<(String, Entry)> {
        self.select(|e| e.is_expired(today))
    }

    /// Entries still in force, sorted by nodeid: these tests are deselected and counted.
    pub(crate) fn active(&self, today: Date) -> Vec<(String, Entry)> {
        self.select(|e| !e.is_expired(today))
    }

    fn select(&self, keep: impl Fn(&Entry) -> bool) -> Vec<(String, Entry)> {
        self.entries
            .iter()
            .filter(|(_, e)| keep(e))
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }

    /// Sorted, pretty JSON with a trailing newline, so the committed file diffs cleanly.
    #[cfg(test)]
    pub(crate) fn to_json(&self) -> String {
        crate::json::to_json(&self.entries)
    }
}

/// The nodeids whose entry `head` adds or extends (a later `expires`) relative to `base`,
/// sorted. Entries the patch removes, shortens or only rewords are not listed: they cannot hide
/// a failure.
pub(crate) fn added_by(base: &Ledger, head: &Ledger) -> Vec<String> {
    head.entries
        .iter()
        .filter(|(nodeid, h)| !matches!(base.get(nodeid), Some(b) if h.expires <= b.expires))
        .map(|(nodeid, _)| nodeid.clone())
        .collect()
}

/// A freeze entry fixgate proposes (for a flaky test or a pre-existing finding), ready to paste.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Suggestion {
    pub(crate) nodeid: String,
    pub(crate) entry: Entry,
}

impl Suggestion {
    /// The entry as one JSON member (`"nodeid": {...}`), to paste into the ledger's object.
    #[cfg(test)]
    pub(crate) fn snippet(&self) -> String {
        let value = serde_json::json!({ &self.nodeid: &self.entry });
        let text = serde_json::to_string(&value).unwrap_or_default();
        // Strip the enclosing braces of the one-member object.
        text.strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(&text)
            .to_owned()
    }
}

/// Proposes freezing `nodeid` from `today` for [`DEFAULT_FREEZE_DAYS`]. An empty owner hint
/// becomes [`UNASSIGNED_OWNER`]; an empty reason becomes a generic one.
pub(crate) fn suggest_entry(
    nodeid: &str,
    today: Date,
    owner_hint: Option<&str>,
    reason: &str,
) -> Suggestion {
    let owner = owner_hint
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .unwrap_or(UNASSIGNED_OWNER);
    let reason = match reason.trim() {
        "" => "suggested by fixgate".to_owned(),
        r => r.to_owned(),
    };
    Suggestion {
        nodeid: nodeid.to_owned(),
        entry: Entry {
            frozen_on: today,
            expires: today.plus_days(DEFAULT_FREEZE_DAYS),
            owner: owner.to_owned(),
            reason,
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/// A ledger that cannot be used. `Display` is the full message: where, what, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed to read {origin} line {line}: {kind}")]
pub(crate) struct FreezeError {
    pub(crate) origin: String,
    /// 1-based, from serde_json; for an entry-level problem (a missing field, the dates out of
    /// order) the line of the entry's closing brace.
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) kind: FreezeErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FreezeErrorKind {
    /// Not JSON, or not an object of objects; the message is serde_json's.
    #[error("{0}; the ledger is an object mapping each nodeid to {{\"frozen_on\", \"expires\", \"owner\", \"reason\"}}")]
    Json(String),
    #[error("an entry has an empty nodeid; use the test's pytest nodeid, e.g. \"tests/test_a.py::test_x\"")]
    EmptyNodeid,
    #[error("{nodeid:?} has two entries; keep one")]
    DuplicateEntry { nodeid: String },
    #[error("entry {nodeid:?} sets {field:?} twice; keep one")]
    DuplicateField { nodeid: String, field: &'static str },
    #[error("entry {nodeid:?} has no {field:?}; add it: {}", field_hint(field))]
    MissingField { nodeid: String, field: &'static str },
    #[error(
        "entry {nodeid:?}: {field:?} must be a string, found {found}; write {}",
        field_hint(field)
    )]
    WrongType {
        nodeid: String,
        field: &'static str,
        found: &'static str,
    },
    #[error("entry {nodeid:?}: {field} {error}; write a real date as YYYY-MM-DD")]
    BadDate {
        nodeid: String,
        field: &'static str,
        error: DateError,
    },
    #[error("entry {nodeid:?}: {field:?} is empty; write {}", field_hint(field))]
    EmptyField { nodeid: String, field: &'static str },
    #[error(
        "entry {nodeid:?} expires on {expires}, before it was frozen on {frozen_on}; set \
         \"expires\" on or after \"frozen_on\""
    )]
    ExpiresBeforeFrozen {
        nodeid: String,
        frozen_on: Date,
        expires: Date,
    },
}

const FIELDS: [&str; 4] = ["frozen_on", "expires", "owner", "reason"];

fn field_hint(field: &str) -> &'static str {
    match field {
        "frozen_on" => "the day the test was frozen, as YYYY-MM-DD",
        "expires" => "the last day the freeze holds, as YYYY-MM-DD",
        "owner" => "who will fix the test",
        _ => "why the test is frozen",
    }
}

/// Parses the ledger's bytes; `origin` names the file in errors.
pub(crate) fn parse(bytes: &[u8], origin: &str) -> Result<Ledger, FreezeError> {
    let problem = RefCell::new(None);
    let warnings = RefCell::new(Vec::new());
    let ctx = Ctx {
        origin,
        problem: &problem,
        warnings: &warnings,
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = LedgerSeed(ctx)
        .deserialize(&mut de)
        .and_then(|entries| de.end().map(|()| entries));
    match parsed {
        Ok(entries) => Ok(Ledger {
            entries,
            warnings: warnings.into_inner(),
        }),
        Err(e) => {
            // Our own problems travel through serde as strings; the side channel keeps them
            // typed, and serde_json supplies the position.
            let kind = problem.into_inner().unwrap_or_else(|| {
                let text = e.to_string();
                let suffix = format!(" at line {} column {}", e.line(), e.column());
                FreezeErrorKind::Json(text.strip_suffix(&suffix).unwrap_or(&text).to_owned())
            });
            Err(FreezeError {
                origin: origin.to_owned(),
                line: e.line(),
                column: e.column(),
                kind,
            })
        }
    }
}

#[derive(Clone, Copy)]
struct Ctx<'a> {
    origin: &'a str,
    problem: &'a RefCell<Option<FreezeErrorKind>>,
    warnings: &'a RefCell<Vec<String>>,
}

impl Ctx<'_> {
    fn fail<E: de::Error>(self, kind: FreezeErrorKind) -> E {
        let message = kind.to_string();
        *self.problem.borrow_mut() = Some(kind);
        E::custom(message)
    }
}

struct LedgerSeed<'a>(Ctx<'a>);

impl<'de> DeserializeSeed<'de> for LedgerSeed<'_> {
    type Value = BTreeMap<String, Entry>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LedgerSeed<'_> {
    type Value = BTreeMap<String, Entry>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let ctx = self.0;
        let mut entries = BTreeMap::new();
        while let Some(nodeid) = map.next_key::<String>()? {
            if nodeid.trim().is_empty() {
                return Err(ctx.fail(FreezeErrorKind::EmptyNodeid));
            }
            if entries.contains_key(&nodeid) {
                return Err(ctx.fail(FreezeErrorKind::DuplicateEntry { nodeid }));
            }
            let entry = map.next_value_seed(EntrySeed {
                ctx,
                nodeid: &nodeid,
            })?;
            entries.insert(nodeid, entry);
        }
        Ok(entries)
    }
}

struct EntrySeed<'a> {
    ctx: Ctx<'a>,
    nodeid: &'a str,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Entry, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object for entry {:?}", self.nodeid)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let EntrySeed { ctx, nodeid } = self;
        let mut values: [Option<String>; 4] = Default::default();
        let mut unknown = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Some(index) = FIELDS.iter().position(|f| *f == key) else {
                map.next_value::<de::IgnoredAny>()?;
                unknown.push(key);
                continue;
            };
            let field = FIELDS[index];
            if values[index].is_some() {
                return Err(ctx.fail(FreezeErrorKind::DuplicateField {
                    nodeid: nodeid.to_owned(),
                    field,
                }));
            }
            let value = map.next_value::<serde_json::Value>()?;
            let serde_json::Value::String(text) = value else {
                return Err(ctx.fail(FreezeErrorKind::WrongType {
                    nodeid: nodeid.to_owned(),
                    field,
                    found: json_kind(&value),
                }));
            };
            // A bad date is reported here, where serde_json's position is still on its line.
            if index < 2 {
                if let Err(error) = Date::parse(&text) {
                    return Err(ctx.fail(FreezeErrorKind::BadDate {
                        nodeid: nodeid.to_owned(),
                        field,
                        error,
                    }));
                }
            }
            values[index] = Some(text);
        }

        for key in unknown {
            ctx.warnings.borrow_mut().push(format!(
                "{}: entry {nodeid:?}: unknown field {key:?} is ignored; known fields are \
                 \"frozen_on\", \"expires\", \"owner\" and \"reason\"",
                ctx.origin
            ));
        }
        let [frozen_on, expires, owner, reason] = values;
        let take = |value: Option<String>, field: &'static str| {
            value.ok_or_else(|| {
                ctx.fail::<A::Error>(FreezeErrorKind::MissingField {
                    nodeid: nodeid.to_owned(),
                    field,
                })
            })
        };
        let (frozen_on, expires) = (take(frozen_on, "frozen_on")?, take(expires, "expires")?);
        let (owner, reason) = (take(owner, "owner")?, take(reason, "reason")?);
        for (text, field) in [(&owner, "owner"), (&reason, "reason")] {
            if text.trim().is_empty() {
                return Err(ctx.fail(FreezeErrorKind::EmptyField {
                    nodeid: nodeid.to_owned(),
                    field,
                }));
            }
        }
        // Both parsed above; a failure here is impossible but must not panic.
        let date = |text: &str, field| {
            Date::parse(text).map_err(|error| {
                ctx.fail::<A::Error>(FreezeErrorKind::BadDate {
                    nodeid: nodeid.to_owned(),
                    field,
                    error,
                })
            })
        };
        let (frozen_on, expires) = (date(&frozen_on, "frozen_on")?, date(&expires, "expires")?);
        if expires < frozen_on {
            return Err(ctx.fail(FreezeErrorKind::ExpiresBeforeFrozen {
                nodeid: nodeid.to_owned(),
                frozen_on,
                expires,
            }));
        }
        Ok(Entry {
            frozen_on,
            expires,
            owner,
            reason,
        })
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> Date {
        match Date::parse(s) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    fn ledger(text: &str) -> Ledger {
        match parse(text.as_bytes(), FILE_NAME) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        }
    }

    fn error(text: &str) -> FreezeError {
        match parse(text.as_bytes(), FILE_NAME) {
            Ok(l) => panic!("parsed: {l:?}"),
            Err(e) => e,
        }
    }

    fn entry(frozen_on: &str, expires: &str) -> Entry {
        Entry {
            frozen_on: date(frozen_on),
            expires: date(expires),
            owner: "ana".into(),
            reason: "flaky on CI".into(),
        }
    }

    const GOOD: &str = r#"{
  "tests/test_a.py::test_one": {
    "frozen_on": "2024-03-01",
    "expires": "2024-03-15",
    "owner": "ana",
    "reason": "flaky on CI"
  },
  "tests/test_b.py::test_two": {
    "frozen_on": "2024-02-01",
    "expires": "2024-02-29",
    "owner": "bo",
    "reason": "waits for upstream fix"
  }
}
"#;

    // --- dates ---

    #[test]
    fn dates_parse_display_and_order() {
        let d = date("2024-02-29");
        assert_eq!((d.year(), d.month(), d.day()), (2024, 2, 29));
        assert_eq!(d.to_string(), "2024-02-29");
        assert_eq!(date("0001-01-01").to_string(), "0001-01-01");
        assert!(date("2024-02-29") < date("2024-03-01"));
        assert!(date("2023-12-31") < date("2024-01-01"));
        assert_eq!("2024-01-09".parse::<Date>(), Ok(date("2024-01-09")));
        assert_eq!(
            serde_json::to_string(&d).unwrap_or_default(),
            "\"2024-02-29\""
        );
    }

    #[test]
    fn dates_reject_bad_shapes_and_impossible_days() {
        for s in [
            "",
            "2024-1-01",
            "2024/01/01",
            "24-01-01",
            "2024-01-011",
            " 2024-01-01",
            "２０２４-01-01",
            "2024-0a-01",
            "+024-01-01",
        ] {
            assert_eq!(Date::parse(s), Err(DateError::Format(s.into())), "{s:?}");
        }
        for s in [
            "2023-02-29",
            "1900-02-29",
            "2024-04-31",
            "2024-13-01",
            "2024-00-10",
            "2024-01-00",
            "2024-01-32",
        ] {
            assert_eq!(Date::parse(s), Err(DateError::Calendar(s.into())), "{s:?}");
        }
        assert!(Date::parse("2000-02-29").is_ok());
        assert_eq!(
            DateError::Calendar("2023-02-29".into()).to_string(),
            "\"2023-02-29\" is not a calendar date"
        );
    }

    #[test]
    fn the_range_is_four_digit_years_and_plus_days_saturates_at_its_ends() {
        assert_eq!(Date::MIN, date("0000-01-01"));
        assert_eq!(Date::MAX, date("9999-12-31"));
        assert_eq!(Date::MAX.plus_days(1), Date::MAX);
        assert_eq!(Date::MIN.plus_days(-1), Date::MIN);
        assert_eq!(Date::MIN.plus_days(i64::MIN), Date::MIN);
        assert_eq!(Date::MAX.plus_days(i64::MAX), Date::MAX);
        assert_eq!(date("2024-06-01").plus_days(i64::MAX), Date::MAX);
        assert_eq!(date("2024-06-01").plus_days(-800_000), Date::MIN);
        assert_eq!(date("1970-01-01").plus_days(19_782), date("2024-02-29"));
    }

    #[test]
    fn today_is_a_date_of_the_range() {
        let today = crate::context::today();
        assert!(Date::MIN < today && today < Date::MAX);
        assert_eq!(Date::parse(&today.to_string()), Ok(today));
    }

    #[test]
    fn plus_days_crosses_months_years_and_leap_days() {
        assert_eq!(date("2024-02-20").plus_days(14), date("2024-03-05"));
        assert_eq!(date("2023-02-20").plus_days(14), date("2023-03-06"));
        assert_eq!(date("2024-12-25").plus_days(14), date("2025-01-08"));
        assert_eq!(date("2024-03-01").plus_days(-1), date("2024-02-29"));
        assert_eq!(date("2024-03-01").plus_days(0), date("2024-03-01"));
    }

    // --- parsing ---

    #[test]
    fn parses_a_ledger() {
        let l = ledger(GOOD);
        assert_eq!(l.len(), 2);
        assert!(l.warnings().is_empty());
        assert_eq!(
            l.get("tests/test_a.py::test_one"),
            Some(&entry("2024-03-01", "2024-03-15"))
        );
        assert!(l.contains("tests/test_b.py::test_two"));
        assert!(ledger("{}").is_empty());
        assert!(ledger(" {\n}\n").is_empty());
    }

    #[test]
    fn round_trips_through_to_json() {
        let l = ledger(GOOD);
        assert_eq!(ledger(&l.to_json()), l);
        assert!(l.to_json().ends_with("}\n"));
    }

    #[test]
    fn syntax_errors_carry_serde_json_line() {
        let e = error("{\n  \"a::b\": {\n    \"owner\": \"x\",\n  }\n}");
        assert_eq!(e.line, 4);
        assert!(matches!(e.kind, FreezeErrorKind::Json(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("failed to read .fixgate/freeze.json line 4: trailing comma"),
            "{text}"
        );
        assert!(!text.contains("column"), "{text}");

        let e = error("[]");
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("expected an object"), "{e}");

        let e = error("{\"a::b\": 3}");
        assert!(
            e.to_string()
                .contains("expected an object for entry \"a::b\""),
            "{e}"
        );

        let e = error("");
        assert!(matches!(e.kind, FreezeErrorKind::Json(_)), "{e:?}");
        let e = error("{} {}");
        assert!(e.to_string().contains("trailing characters"), "{e}");
        let e = error("\u{feff}{}");
        assert!(matches!(e.kind, FreezeErrorKind::Json(_)), "{e:?}");
    }

    #[test]
    fn missing_field_names_entry_field_and_line() {
        let e = error(
            "{\n  \"t.py::ok\": {\"frozen_on\": \"2024-01-01\", \"expires\": \"2024-01-02\", \
             \"owner\": \"a\", \"reason\": \"r\"},\n  \"t.py::x\": {\n    \"frozen_on\": \
             \"2024-01-01\",\n    \"owner\": \"a\",\n    \"reason\": \"r\"\n  }\n}\n",
        );
        assert_eq!(
            e.kind,
            FreezeErrorKind::MissingField {
                nodeid: "t.py::x".into(),
                field: "expires"
            }
        );
        assert_eq!(e.line, 7);
        assert_eq!(
            e.to_string(),
            "failed to read .fixgate/freeze.json line 7: entry \"t.py::x\" has no \"expires\"; \
             add it: the last day the freeze holds, as YYYY-MM-DD"
        );
    }

    #[test]
    fn impossible_date_names_its_line() {
        let e = error(
            "{\n  \"t.py::x\": {\n    \"frozen_on\": \"2024-01-01\",\n    \"expires\": \
             \"2024-02-30\",\n    \"owner\": \"a\",\n    \"reason\": \"r\"\n  }\n}\n",
        );
        assert_eq!(e.line, 4);
        assert_eq!(
            e.to_string(),
            "failed to read .fixgate/freeze.json line 4: entry \"t.py::x\": expires \
             \"2024-02-30\" is not a calendar date; write a real date as YYYY-MM-DD"
        );
        let e = error(r#"{"t.py::x": {"frozen_on": "March 1st"}}"#);
        assert_eq!(
            e.kind,
            FreezeErrorKind::BadDate {
                nodeid: "t.py::x".into(),
                field: "frozen_on",
                error: DateError::Format("March 1st".into()),
            }
        );
    }

    #[test]
    fn expires_before_frozen_on_is_an_error() {
        let e = error(
            r#"{"t.py::x": {"frozen_on": "2024-03-02", "expires": "2024-03-01", "owner": "a", "reason": "r"}}"#,
        );
        assert_eq!(
            e.kind,
            FreezeErrorKind::ExpiresBeforeFrozen {
                nodeid: "t.py::x".into(),
                frozen_on: date("2024-03-02"),
                expires: date("2024-03-01"),
            }
        );
        assert!(
            e.to_string().contains(
                "entry \"t.py::x\" expires on 2024-03-01, before it was frozen on 2024-03-02"
            ),
            "{e}"
        );
        // The same day is a one-day freeze, not an error.
        let l = ledger(
            r#"{"t.py::x": {"frozen_on": "2024-03-02", "expires": "2024-03-02", "owner": "a", "reason": "r"}}"#,
        );
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn wrong_types_empty_values_and_duplicates() {
        let e = error(r#"{"t.py::x": {"frozen_on": 20240101}}"#);
        assert_eq!(
            e.kind,
            FreezeErrorKind::WrongType {
                nodeid: "t.py::x".into(),
                field: "frozen_on",
                found: "a number"
            }
        );
        let e = error(
            r#"{"t.py::x": {"frozen_on": "2024-03-01", "expires": "2024-03-02", "owner": " ", "reason": "r"}}"#,
        );
        assert_eq!(
            e.kind,
            FreezeErrorKind::EmptyField {
                nodeid: "t.py::x".into(),
                field: "owner"
            }
        );
        assert!(
            e.to_string().ends_with("write who will fix the test"),
            "{e}"
        );
        let e = error(r#"{"t.py::x": {"owner": "a", "owner": "b"}}"#);
        assert_eq!(
            e.kind,
            FreezeErrorKind::DuplicateField {
                nodeid: "t.py::x".into(),
                field: "owner"
            }
        );
        let one =
            r#"{"frozen_on": "2024-03-01", "expires": "2024-03-02", "owner": "a", "reason": "r"}"#;
        let e = error(&format!("{{\n\"t.py::x\": {one},\n\"t.py::x\": {one}\n}}"));
        assert_eq!(
            e.kind,
            FreezeErrorKind::DuplicateEntry {
                nodeid: "t.py::x".into()
            }
        );
        assert_eq!(e.line, 3);
        let e = error(&format!("{{\"\": {one}}}"));
        assert_eq!(e.kind, FreezeErrorKind::EmptyNodeid);
    }

    #[test]
    fn unknown_fields_warn() {
        let l = ledger(
            r#"{"t.py::x": {"frozen_on": "2024-03-01", "expires": "2024-03-02", "owner": "a", "reason": "r", "ticket": {"id": 4}}}"#,
        );
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.warnings(),
            [
                ".fixgate/freeze.json: entry \"t.py::x\": unknown field \"ticket\" is ignored; \
              known fields are \"frozen_on\", \"expires\", \"owner\" and \"reason\""
            ]
        );
    }

    #[test]
    fn garbage_never_panics() {
        let inputs: [&[u8]; 8] = [
            b"\xff\xfe",
            b"{\"a\":",
            b"{\"a\": {\"frozen_on\": \"9999-12-31\", \"expires\": \"9999-12-31\", \"owner\": \"o\", \"reason\": \"r\"}}",
            b"null",
            b"{\"a\": {}}",
            b"{\"a\": {\"frozen_on\": null}}",
            b"{\"a\": {\"expires\": \"2024-02-30\"}}",
            b"{\"a\": []}",
        ];
        for bytes in inputs {
            let _ = parse(bytes, "x");
        }
    }

    // --- queries ---

    #[test]
    fn expired_and_active_split_on_the_expiry_day() {
        let l = ledger(GOOD);
        let names = |v: Vec<(String, Entry)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        // 2024-02-29 is the last good day of test_two.
        assert!(l.expired(date("2024-02-29")).is_empty());
        assert_eq!(
            names(l.expired(date("2024-03-01"))),
            ["tests/test_b.py::test_two"]
        );
        assert_eq!(
            names(l.active(date("2024-03-01"))),
            ["tests/test_a.py::test_one"]
        );
        assert_eq!(l.expired(date("2024-03-16")).len(), 2);
        assert!(l.active(date("2024-03-16")).is_empty());
    }

    #[test]
    fn added_by_lists_new_and_extended_entries() {
        let mut base = Ledger::default();
        base.insert("t::same", entry("2024-01-01", "2024-02-01"));
        base.insert("t::extended", entry("2024-01-01", "2024-02-01"));
        base.insert("t::shortened", entry("2024-01-01", "2024-02-01"));
        base.insert("t::removed", entry("2024-01-01", "2024-02-01"));
        let mut head = Ledger::default();
        head.insert("t::same", entry("2024-01-01", "2024-02-01"));
        head.insert("t::extended", entry("2024-01-01", "2024-03-01"));
        head.insert("t::shortened", entry("2024-01-01", "2024-01-15"));
        head.insert("t::new", entry("2024-01-10", "2024-01-24"));
        let mut reworded = entry("2024-01-01", "2024-02-01");
        reworded.owner = "someone else".into();
        base.insert("t::reworded", entry("2024-01-01", "2024-02-01"));
        head.insert("t::reworded", reworded);
        assert_eq!(added_by(&base, &head), ["t::extended", "t::new"]);
        assert!(added_by(&head, &head).is_empty());
    }

    #[test]
    fn suggestions_default_to_two_weeks_and_paste_cleanly() {
        let today = date("2024-02-20");
        let s = suggest_entry(
            "tests/t.py::test_x",
            today,
            Some(" ana "),
            "flaky on repeat",
        );
        assert_eq!(s.entry.frozen_on, today);
        assert_eq!(s.entry.expires, date("2024-03-05"));
        assert_eq!(s.entry.owner, "ana");
        assert_eq!(
            s.snippet(),
            r#""tests/t.py::test_x":{"expires":"2024-03-05","frozen_on":"2024-02-20","owner":"ana","reason":"flaky on repeat"}"#
        );
        // A pasted snippet is a valid ledger.
        assert_eq!(
            ledger(&format!("{{{}}}", s.snippet())).get("tests/t.py::test_x"),
            Some(&s.entry)
        );
        let s = suggest_entry("t::y", today, None, " ");
        assert_eq!(s.entry.owner, UNASSIGNED_OWNER);
        assert_eq!(s.entry.reason, "suggested by fixgate");
        assert_eq!(
            suggest_entry("t::y", today, Some(""), "r").entry.owner,
            UNASSIGNED_OWNER
        );
    }
}
