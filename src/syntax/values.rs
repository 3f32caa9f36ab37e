//! KDL values in, typed values out: strings, counts, booleans, durations and dollar amounts.

use std::time::Duration;

use kdl::{KdlEntry, KdlValue};

use super::Cx;
use super::ast::{Scalar, Spanned};
use crate::diag::Diagnostic;

/// The KDL type a value was written as, for "expected X, found Y" messages.
pub(crate) fn kind(value: &KdlValue) -> &'static str {
    match value {
        KdlValue::String(_) => "a string",
        KdlValue::Integer(_) => "an integer",
        KdlValue::Float(_) => "a number",
        KdlValue::Bool(_) => "a boolean",
        KdlValue::Null => "#null",
    }
}

fn mismatch(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str, expected: &str, help: &str) {
    let d = Diagnostic::error(
        "mvk::wrong-type",
        format!("{what} must be {expected}, found {}", kind(entry.value())),
    )
    .at(cx.span(entry.span()), format!("expected {expected}"))
    .help(help.to_string());
    cx.diags.push(d);
}

pub(crate) fn string(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<String>> {
    match entry.value() {
        KdlValue::String(s) => Some(Spanned::new(s.clone(), cx.span(entry.span()))),
        _ => {
            mismatch(
                cx,
                entry,
                what,
                "a string",
                "quote the value, e.g. \"value\"",
            );
            None
        }
    }
}

/// A non-empty string (names, paths, commands).
pub(crate) fn nonempty(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<String>> {
    let s = string(cx, entry, what)?;
    if s.node.trim().is_empty() {
        cx.diags.push(
            Diagnostic::error("mvk::empty-value", format!("{what} must not be empty"))
                .at(s.span, "empty")
                .help("write a value between the quotes"),
        );
        return None;
    }
    Some(s)
}

pub(crate) fn boolean(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<bool>> {
    match entry.value() {
        KdlValue::Bool(b) => Some(Spanned::new(*b, cx.span(entry.span()))),
        _ => {
            mismatch(
                cx,
                entry,
                what,
                "a boolean",
                "write #true or #false (KDL 2.0 booleans start with `#`)",
            );
            None
        }
    }
}

/// A whole number in `min..=max`.
pub(crate) fn count(
    cx: &mut Cx<'_>,
    entry: &KdlEntry,
    what: &str,
    min: u64,
    max: u64,
) -> Option<Spanned<u64>> {
    let span = cx.span(entry.span());
    let n = match entry.value() {
        KdlValue::Integer(i) => *i,
        KdlValue::Float(f) if f.fract() == 0.0 && f.is_finite() => *f as i128,
        _ => {
            mismatch(
                cx,
                entry,
                what,
                "a whole number",
                "write a number without quotes, e.g. 3",
            );
            return None;
        }
    };
    if n < i128::from(min) || n > i128::from(max) {
        cx.diags.push(
            Diagnostic::error(
                "mvk::out-of-range",
                format!("{what} must be between {min} and {max}, found {n}"),
            )
            .at(span, "out of range")
            .help(format!("write a whole number from {min} to {max}")),
        );
        return None;
    }
    u64::try_from(n).ok().map(|n| Spanned::new(n, span))
}

pub(crate) fn small_count(
    cx: &mut Cx<'_>,
    entry: &KdlEntry,
    what: &str,
    min: u32,
) -> Option<Spanned<u32>> {
    count(cx, entry, what, u64::from(min), u64::from(u32::MAX))
        .and_then(|s| u32::try_from(s.node).ok().map(|n| Spanned::new(n, s.span)))
}

/// A duration written with units: `"90s"`, `"30m"`, `"1h30m"`, `"500ms"`, `"2d"`.
pub(crate) fn duration(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<Duration>> {
    let span = cx.span(entry.span());
    let help = "write a duration with a unit in quotes, e.g. \"90s\", \"30m\" or \"1h30m\" (units: ms, s, m, h, d)";
    let text = match entry.value() {
        KdlValue::String(s) => s.clone(),
        KdlValue::Integer(_) | KdlValue::Float(_) => {
            cx.diags.push(
                Diagnostic::error("mvk::bad-duration", format!("{what} needs a unit"))
                    .at(span, "a number without a unit")
                    .help(help),
            );
            return None;
        }
        _ => {
            mismatch(cx, entry, what, "a duration", help);
            return None;
        }
    };
    match parse_duration(&text) {
        Ok(d) if d.is_zero() => {
            cx.diags.push(
                Diagnostic::error(
                    "mvk::bad-duration",
                    format!("{what} must be longer than zero"),
                )
                .at(span, "zero")
                .help(help),
            );
            None
        }
        Ok(d) => Some(Spanned::new(d, span)),
        Err(why) => {
            cx.diags.push(
                Diagnostic::error(
                    "mvk::bad-duration",
                    format!("`{text}` is not a duration: {why}"),
                )
                .at(span, "not a duration")
                .help(help),
            );
            None
        }
    }
}

/// Parses `1h30m`, `90s`, `500ms`: one or more number-unit pairs, largest unit first.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("it is empty".into());
    }
    let mut total_ms: u128 = 0;
    let mut rest = text;
    let mut last_unit_ms = u128::MAX;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let (num, tail) = rest.split_at(digits);
        let unit_len = tail.len()
            - tail
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ms: u128 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{num}` has no unit")),
            other => return Err(format!("unknown unit `{other}`")),
        };
        if unit_ms >= last_unit_ms {
            return Err("write larger units first, each once (e.g. `1h30m`)".into());
        }
        last_unit_ms = unit_ms;
        let n: u128 = num.parse().map_err(|_| format!("`{num}` is too large"))?;
        total_ms = n
            .checked_mul(unit_ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or("it is too long")?;
        rest = tail;
    }
    let ms = u64::try_from(total_ms).map_err(|_| "it is too long".to_string())?;
    Ok(Duration::from_millis(ms))
}

/// A dollar amount as a number (`5`, `2.50`), kept exactly as micro-dollars.
pub(crate) fn usd(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<u64>> {
    let span = cx.span(entry.span());
    let help = "write an amount in US dollars as a number, e.g. usd=5.0 or usd=0.25";
    let micros = match entry.value() {
        KdlValue::Integer(i) if *i >= 0 => {
            i.checked_mul(1_000_000).and_then(|m| u64::try_from(m).ok())
        }
        KdlValue::Float(f) if f.is_finite() && *f >= 0.0 => {
            let m = (f * 1_000_000.0).round();
            (m <= u64::MAX as f64).then_some(m as u64)
        }
        KdlValue::Integer(_) | KdlValue::Float(_) => {
            cx.diags.push(
                Diagnostic::error("mvk::bad-amount", format!("{what} must not be negative"))
                    .at(span, "negative")
                    .help(help),
            );
            return None;
        }
        _ => {
            mismatch(cx, entry, what, "a number of dollars", help);
            return None;
        }
    };
    match micros {
        Some(m) if m > 0 => Some(Spanned::new(m, span)),
        Some(_) => {
            cx.diags.push(
                Diagnostic::error("mvk::bad-amount", format!("{what} must be more than zero"))
                    .at(span, "zero")
                    .help("a zero budget could never run an attempt; leave it out for no limit"),
            );
            None
        }
        None => {
            cx.diags.push(
                Diagnostic::error("mvk::bad-amount", format!("{what} is too large"))
                    .at(span, "too large")
                    .help(help),
            );
            None
        }
    }
}

/// A fraction of a budget (`at=0.8`, `warn-at=0.8`), above 0 and at most 1, kept in
/// thousandths; `example` is shown in the help of a value out of range.
pub(crate) fn fraction(
    cx: &mut Cx<'_>,
    entry: &KdlEntry,
    what: &str,
    example: &str,
) -> Option<Spanned<u32>> {
    let span = cx.span(entry.span());
    let value = match entry.value() {
        KdlValue::Float(f) => Some(*f),
        #[expect(
            clippy::cast_precision_loss,
            reason = "only 0 and 1 are in range; anything larger is refused either way"
        )]
        KdlValue::Integer(i) => Some(*i as f64),
        _ => None,
    };
    let thousandths = value
        .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1.0)
        .map(|f| (f * 1000.0).round())
        .filter(|t| *t >= 1.0);
    match thousandths {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "between 1 and 1000"
        )]
        Some(t) => Some(Spanned::new(t as u32, span)),
        None => {
            let found = match entry.value() {
                KdlValue::String(s) => format!("\"{s}\""),
                other => other.to_string(),
            };
            cx.push(
                Diagnostic::error(
                    "mvk::out-of-range",
                    format!("{what} must be a fraction of the budget above 0 and at most 1, found {found}"),
                )
                .at(span, "not a fraction")
                .help(format!("write a number without quotes, e.g. {example}")),
            );
            None
        }
    }
}

/// A parameter value: a string, number or boolean.
pub(crate) fn scalar(cx: &mut Cx<'_>, entry: &KdlEntry, what: &str) -> Option<Spanned<Scalar>> {
    let span = cx.span(entry.span());
    let value = match entry.value() {
        KdlValue::String(s) => Scalar::Str(s.clone()),
        KdlValue::Integer(i) => match i64::try_from(*i) {
            Ok(i) => Scalar::Int(i),
            Err(_) => {
                cx.diags.push(
                    Diagnostic::error("mvk::out-of-range", format!("{what} is too large"))
                        .at(span, "too large")
                        .help("write a smaller number, or quote it as a string"),
                );
                return None;
            }
        },
        KdlValue::Float(f) => Scalar::Float(*f),
        KdlValue::Bool(b) => Scalar::Bool(*b),
        KdlValue::Null => {
            mismatch(
                cx,
                entry,
                what,
                "a string, number or boolean",
                "leave the property out instead of writing #null",
            );
            return None;
        }
    };
    Some(Spanned::new(value, span))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_units_largest_first() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
    }

    #[test]
    fn durations_without_units_or_out_of_order_are_refused() {
        assert_eq!(parse_duration("30"), Err("`30` has no unit".to_string()));
        assert_eq!(parse_duration("5x"), Err("unknown unit `x`".to_string()));
        assert!(
            parse_duration("30m1h")
                .unwrap_err()
                .contains("larger units first")
        );
        assert!(
            parse_duration("m")
                .unwrap_err()
                .contains("expected a number")
        );
        assert!(parse_duration("").is_err_and(|e| e.contains("empty")));
    }
}
