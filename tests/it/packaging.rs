//! The files an operator installs: `contrib/osprey.service` is a unit that
//! systemd accepts as written (no unknown key, no bad value, the binary
//! runs), and its descriptor limit leaves room for every session;
//! `osprey ping`, the container's health check; and the shapes of the
//! node boxes' app definitions in `contrib/` (scripts/test-umbrel.sh runs
//! Umbrel's, tests/it/dropin.rs starts the others against Core).

use std::path::Path;
use std::process::Command;

const UNIT: &str = include_str!("../../contrib/osprey.service");

/// RocksDB's table files that the store keeps open (`max_open_files`).
const ROCKSDB_OPEN_FILES: usize = 256;

/// 1. Copy the unit into a temp dir with ExecStart pointing at the binary
///    this build made (verify needs an executable there).
/// 2. `systemd-analyze verify` exits 0 and prints nothing: it only warns
///    (exit 0) about an unknown key or a bad value, so a warning fails too.
///
/// systemd-analyze is required (scripts/setup.sh installs it): a missing
/// one fails the test rather than leaving the unit unchecked.
#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let analyze = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("systemd-analyze is not installed (scripts/setup.sh installs it with apt)");
    // 1.
    let exec_start = UNIT
        .lines()
        .find(|line| line.starts_with("ExecStart="))
        .expect("the unit has an ExecStart");
    let installed = exec_start
        .trim_start_matches("ExecStart=")
        .split_whitespace()
        .next()
        .expect("ExecStart names a binary");
    assert_eq!(
        installed, "/usr/local/bin/osprey",
        "where the install steps put it"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("osprey.service");
    std::fs::write(
        &unit,
        UNIT.replace(
            exec_start,
            &exec_start.replace(installed, env!("CARGO_BIN_EXE_osprey")),
        ),
    )
    .expect("writing the unit");
    // 2.
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("running systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify {}: {}\n{stderr}{}",
        unit.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The unit's LimitNOFILE covers the default sessions_max, RocksDB's open
/// table files and some margin, and the unit stops Osprey with SIGTERM and
/// gives it time to close the index.
#[test]
fn systemd_unit_limits_fit_the_defaults() {
    let value = |key: &str| -> String {
        UNIT.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("the unit sets {key}"))
            .to_string()
    };
    let nofile: usize = value("LimitNOFILE").parse().expect("a number");
    let sessions = osprey_server::Limits::default().sessions_max;
    assert!(
        nofile >= sessions + ROCKSDB_OPEN_FILES + 100,
        "LimitNOFILE={nofile} leaves no room beside {sessions} sessions and {ROCKSDB_OPEN_FILES} RocksDB files"
    );
    assert_eq!(value("KillSignal"), "SIGTERM");
    let stop_secs: u64 = value("TimeoutStopSec").parse().expect("seconds");
    assert!(stop_secs >= 120, "TimeoutStopSec={stop_secs}");
    assert_eq!(value("User"), "osprey");
    assert_eq!(value("ProtectSystem"), "strict");
}

/// `osprey ping` (the Dockerfile's HEALTHCHECK) against a one-connection
/// server that reads the request line and answers `reply`; returns
/// whether it exited 0, and the request it sent. `listen_on_any` hands it
/// 0.0.0.0:PORT, as the container's OSPREY_ELECTRUM_RPC_ADDR is.
fn ping(reply: &'static str, listen_on_any: bool) -> (bool, String) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut request = String::new();
        BufReader::new(&stream)
            .read_line(&mut request)
            .expect("read");
        (&stream).write_all(reply.as_bytes()).expect("write");
        request
    });
    let host = if listen_on_any {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let out = Command::new(env!("CARGO_BIN_EXE_osprey"))
        .args(["ping", "--timeout", "5"])
        .env("OSPREY_ELECTRUM_RPC_ADDR", format!("{host}:{port}"))
        .output()
        .expect("running osprey ping");
    (out.status.success(), server.join().expect("server thread"))
}

#[test]
fn ping_succeeds_only_on_a_server_ping_answer() {
    let (ok, request) = ping("{\"jsonrpc\":\"2.0\",\"result\":null,\"id\":0}\n", true);
    assert!(ok, "an answer to server.ping");
    let request: serde_json::Value = serde_json::from_str(&request).expect("a JSON line");
    assert_eq!(request["method"], "server.ping");
    let refusals = [
        "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32603,\"message\":\"busy\"},\"id\":0}\n",
        "{\"jsonrpc\":\"2.0\",\"result\":null,\"id\":7}\n",
        "HTTP/1.1 400 Bad Request\r\n\r\n",
        "",
    ];
    for reply in refusals {
        assert!(!ping(reply, false).0, "ping accepted {reply:?}");
    }
}

#[test]
fn ping_fails_where_nothing_listens() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_osprey"))
        .args(["ping", &format!("127.0.0.1:{port}")])
        .output()
        .expect("running osprey ping");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to 127.0.0.1"));
}

/// The keys of a myNode dynamic app's JSON (sdk_version 2), as
/// mynodebtc/mynode's own apps have them (`mynode_apps/datum/datum.json`
/// at 008fd796): myNode's app manager reads each.
const MYNODE_APP_KEYS: &[&str] = &[
    "name",
    "short_name",
    "author",
    "website",
    "category",
    "short_description",
    "description",
    "latest_version",
    "supported_archs",
    "minimum_debian_version",
    "download_skip",
    "download_type",
    "download_source_url",
    "download_binary_url",
    "install_env_vars",
    "supports_app_page",
    "supports_testnet",
    "http_port",
    "https_port",
    "requires_bitcoin",
    "requires_docker_image_installation",
    "requires_electrs",
    "requires_lightning",
    "show_on_application_page",
    "show_on_homepage",
    "show_on_status_page",
    "hide_status_icon",
    "app_tile_name",
    "app_tile_running_status_text",
    "app_tile_button_text",
    "app_tile_button_href",
    "app_page_show_open_button",
    "app_page_content",
    "can_uninstall",
    "can_reinstall",
    "can_enable_disable",
    "is_beta",
    "is_premium",
    "homepage_section",
    "homepage_order",
    "app_type",
    "sdk_version",
];

/// The myNode app's JSON has every key of myNode's format, no other, and
/// names its files (`<short_name>.service`, `scripts/install_<short_name>.sh`,
/// `scripts/pre_<short_name>.sh`) as myNode's app manager looks for them;
/// its download URLs name the release tarballs of both architectures.
#[test]
fn mynode_app_has_mynodes_shape() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/mynode/osprey");
    let text = std::fs::read_to_string(dir.join("osprey.json")).expect("osprey.json");
    let app: serde_json::Value = serde_json::from_str(&text).expect("osprey.json is JSON");
    let keys: std::collections::BTreeSet<&str> = app
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    let expected: std::collections::BTreeSet<&str> = MYNODE_APP_KEYS.iter().copied().collect();
    assert_eq!(keys, expected, "osprey.json's keys are not myNode's");
    assert_eq!(app["sdk_version"], 2);
    assert_eq!(app["short_name"], "osprey");
    assert_eq!(app["app_tile_button_href"], "/app/osprey/info");
    assert_eq!(
        app["supported_archs"],
        serde_json::json!(["aarch64", "x86_64"])
    );
    assert_eq!(
        app["latest_version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    for (arch, url) in app["download_binary_url"].as_object().expect("per arch") {
        let url = url.as_str().expect("a URL");
        assert!(
            url.ends_with(&format!("osprey-{{VERSION}}-{arch}-linux.tar.gz")),
            "{arch}: {url} is not the release tarball"
        );
    }
    for file in [
        "osprey.service",
        "osprey.toml",
        "scripts/install_osprey.sh",
        "scripts/pre_osprey.sh",
    ] {
        assert!(dir.join(file).is_file(), "contrib/mynode/osprey/{file}");
    }
}

/// The StartOS package's manifest gives every field start-sdk's
/// `setupManifest` requires, for both architectures, and what the other
/// files refer to is declared there: the image the daemon runs and the
/// dependency it mounts. (A text check: the SDK's 0.4 releases are not on
/// the npm registry reachable here, so `tsc` does not run.)
#[test]
fn startos_package_has_start_sdks_shape() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/startos");
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    };
    let manifest = read("startos/manifest/index.ts");
    for field in [
        "id: 'osprey',",
        "title: 'Osprey',",
        "license: 'mit',",
        "wrapperRepo:",
        "upstreamRepo:",
        "supportSite:",
        "marketingSite:",
        "docsUrl:",
        "donationUrl:",
        "description: {",
        "short:",
        "long:",
        "volumes: ['main'],",
        "images: {",
        "osprey: {",
        "source: { dockerBuild: { dockerfile: 'Dockerfile', workdir: '.' } },",
        "arch: ['x86_64', 'aarch64'],",
        "dependencies: {",
        "bitcoind: {",
        "optional: false,",
    ] {
        assert!(
            manifest.contains(field),
            "startos/manifest/index.ts has no {field:?}"
        );
    }
    let main = read("startos/main.ts");
    assert!(
        main.contains("{ imageId: 'osprey' }"),
        "main.ts runs the manifest's image"
    );
    assert!(
        main.contains("volumeId: 'main'"),
        "main.ts mounts the manifest's volume"
    );
    assert!(
        main.contains("dependencyId: 'bitcoind'"),
        "main.ts mounts bitcoind's volume"
    );
    assert!(
        main.contains("['osprey', 'ping',"),
        "main.ts's readiness check is osprey ping"
    );
    assert!(read("startos/dependencies.ts").contains("bitcoind: {"));
    assert!(read("Dockerfile").contains("COPY osprey-linux-${ARCH}/osprey "));
}

/// RaspiBlitz's bonus script answers RaspiBlitz's calls (`status`,
/// `status-sync`, `on`, `off`, `install`, `uninstall`), parses as bash, and
/// without arguments prints its usage and exits 1, as RaspiBlitz's own
/// bonus scripts do.
#[test]
fn raspiblitz_script_has_raspiblitzs_shape() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/raspiblitz/bonus.osprey.sh");
    let text = std::fs::read_to_string(&script).expect("bonus.osprey.sh");
    for call in [
        "\"$1\" = \"status\"",
        "\"$1\" = \"status-sync\"",
        "\"$1\" = \"on\"",
        "\"$1\" = \"off\"",
        "\"$1\" = \"install\"",
        "\"$1\" = \"uninstall\"",
    ] {
        assert!(
            text.contains(call),
            "bonus.osprey.sh does not handle {call}"
        );
    }
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(
        syntax.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let usage = Command::new("bash").arg(&script).output().expect("bash");
    assert_eq!(usage.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&usage.stdout)
        .contains("bonus.osprey.sh [on|off|install|uninstall]"));
}
