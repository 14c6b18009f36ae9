//! Describes the machine a bench ran on (CPUs, RAM, host) and the date, for
//! the reports: figures from different machines are not comparable, so every
//! report says where it was measured. Reads `/proc`; elsewhere says "unknown".

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    /// CPUs this process may use (`nproc`).
    pub cpus: usize,
    pub cpu_model: String,
    /// `MemTotal` of `/proc/meminfo`, in bytes; 0 when unknown.
    pub mem_total_bytes: u64,
    pub os: String,
}

impl Machine {
    pub fn current() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let hostname = read("/proc/sys/kernel/hostname").trim().to_owned();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|rest| rest.split_once(':'))
            })
            .map(|(_, model)| model.trim().to_owned())
            .unwrap_or_default();
        Machine {
            hostname: if hostname.is_empty() {
                "unknown".to_owned()
            } else {
                hostname
            },
            cpus: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(0),
            cpu_model: if cpu_model.is_empty() {
                "unknown CPU".to_owned()
            } else {
                cpu_model
            },
            mem_total_bytes: mem_total_bytes(&read("/proc/meminfo")).unwrap_or(0),
            os: std::env::consts::OS.to_owned(),
        }
    }

    /// Returns a one-line description, e.g. "2 CPUs (AMD EPYC), 7.8 GiB RAM, linux, host box".
    pub fn describe(&self) -> String {
        let ram = if self.mem_total_bytes == 0 {
            "unknown RAM".to_owned()
        } else {
            format!(
                "{:.1} GiB RAM",
                self.mem_total_bytes as f64 / f64::from(1u32 << 30)
            )
        };
        format!(
            "{} CPUs ({}), {ram}, {}, host {}",
            self.cpus, self.cpu_model, self.os, self.hostname
        )
    }
}

/// Parses `MemTotal` (in kB) out of `/proc/meminfo` text.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Returns the current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`, so the
/// bench needs no date crate.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Converts days since 1970-01-01 to a proleptic Gregorian (year, month,
/// day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:        8046404 kB\nMemFree:          123 kB\n";
        assert_eq!(mem_total_bytes(text), Some(8_046_404 * 1024));
        assert_eq!(mem_total_bytes("garbage"), None);
    }
}
