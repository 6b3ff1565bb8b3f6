//! Durations on the command line: `30s`, `500ms`, `1.5s`, `2m`, `1h`; a bare number is
//! seconds (as `flock -w` and `timeout` take them).

use std::time::Duration;

/// Parses `text` as a duration (clap's `value_parser`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "unknown unit '{unit}': use ms, s, m or h (30s, 500ms, 2m)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (30s, 500ms, 1.5s, 2m, 1h)"))?;
    let seconds = value * scale;
    if !seconds.is_finite() || seconds > 365.0 * 86400.0 {
        return Err(format!("'{text}' is longer than a year"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A positive duration of whole milliseconds or more (a TTL, a grace, a wait).
pub fn positive(text: &str) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration < Duration::from_millis(1) {
        return Err(format!("'{text}' is shorter than 1 ms"));
    }
    Ok(duration)
}

/// A duration for people: `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", duration.as_secs_f64()),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, (ms / 1_000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_seconds() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn nonsense_is_refused_with_the_forms_it_takes() {
        assert!(parse("5 days").unwrap_err().contains("unknown unit"));
        assert!(parse("s").unwrap_err().contains("not a duration"));
        assert!(parse("1.2.3s").unwrap_err().contains("not a duration"));
        assert!(parse("100000h").unwrap_err().contains("longer than a year"));
        assert!(positive("0").unwrap_err().contains("shorter than 1 ms"));
    }

    #[test]
    fn shown_for_people() {
        assert_eq!(show(Duration::from_millis(850)), "850ms");
        assert_eq!(show(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(show(Duration::from_secs(245)), "4m05s");
        assert_eq!(show(Duration::from_secs(7380)), "2h03m");
    }
}
