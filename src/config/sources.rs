//! Where each setting of a run came from, in electrs' order of
//! precedence: the variables (`ELECTRS_*` under `OSPREY_*`), then the
//! command line from left to right, a `--conf` or `--conf-dir` file
//! counting where it appears on it, as configure_me merges it
//! (Kixunil/configure_me `merge_args`: a flag after `--conf` wins over
//! the file, a flag before it loses).

use super::files::UnknownKeys;
use super::{electrs, ConfigArgs, Launch, Source};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args as _, FromArgMatches as _};
use std::ffi::OsString;
use std::sync::OnceLock;

/// Settings that name config files rather than being layered.
const FILE_SETTINGS: [&str; 3] = ["conf", "conf_dir", "skip_default_conf_files"];

/// The sources of `all`, the settings `matches` hold (a subcommand's,
/// parsed with its variables), lowest precedence first, without the
/// default files; and whether the default files are skipped, and whether
/// a `--conf` file was given.
///
/// # Errors
/// A variable whose value does not parse.
pub(super) fn from_matches(
    all: &ConfigArgs,
    matches: &ArgMatches,
    launch: Launch,
) -> anyhow::Result<(Vec<Source>, bool, bool)> {
    let from_env = |id: &str| matches.value_source(id) == Some(ValueSource::EnvVariable);
    let mut sources = Vec::new();
    // OSPREY_CONF_DIR and OSPREY_CONF are Osprey's own (electrs has no
    // variable for its files): under the variables, as before.
    if let (Some(dir), true) = (&all.conf_dir, from_env("conf_dir")) {
        sources.push(Source::Dir(dir.clone(), UnknownKeys::Refused));
    }
    if let (Some(file), true) = (&all.conf, from_env("conf")) {
        sources.push(Source::File(file.clone(), UnknownKeys::Refused));
    }
    sources.push(Source::Settings(Box::new(variables(
        electrs_variables_command(),
        "ELECTRS_*",
    )?)));
    sources.push(Source::Settings(Box::new(variables(
        layer_command(),
        "OSPREY_*",
    )?)));

    // The command line, each setting at its last position.
    let command = ConfigArgs::augment_args(clap::Command::new("osprey"));
    let mut given: Vec<(usize, Given)> = Vec::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let Some(at) = matches.indices_of(id).and_then(Iterator::max) else {
            continue;
        };
        // Files named by a launch without a subcommand are electrs'.
        let unknown = match launch {
            Launch::Electrs => UnknownKeys::Warned,
            Launch::Osprey => UnknownKeys::Refused,
        };
        match id {
            "conf" => given.extend(
                (all.conf.clone()).map(|file| (at, Given::Files(Source::File(file, unknown)))),
            ),
            "conf_dir" => given.extend(
                (all.conf_dir.clone()).map(|dir| (at, Given::Files(Source::Dir(dir, unknown)))),
            ),
            "skip_default_conf_files" => {}
            _ => given.push((at, Given::Flags(flag_tokens(arg, matches)))),
        }
    }
    given.sort_by_key(|(at, _)| *at);
    let mut flags: Vec<OsString> = Vec::new();
    for (_, item) in given {
        match item {
            Given::Flags(tokens) => flags.extend(tokens),
            Given::Files(files) => {
                if !flags.is_empty() {
                    sources.push(Source::Settings(Box::new(parse_flags(std::mem::take(
                        &mut flags,
                    ))?)));
                }
                sources.push(files);
            }
        }
    }
    if !flags.is_empty() {
        sources.push(Source::Settings(Box::new(parse_flags(flags)?)));
    }
    let conf_given = all.conf.is_some();
    Ok((sources, all.skip_default_conf_files, conf_given))
}

/// What the command line gave, at a position.
enum Given {
    /// A setting, as the flags that give it again.
    Flags(Vec<OsString>),
    /// `--conf` or `--conf-dir`.
    Files(Source),
}

/// The flags that give `arg` the value `matches` has for it.
fn flag_tokens(arg: &clap::Arg, matches: &ArgMatches) -> Vec<OsString> {
    let id = arg.get_id().as_str();
    let long = format!(
        "--{}",
        arg.get_long().expect("every setting has a long flag")
    );
    match arg.get_action() {
        ArgAction::SetTrue => {
            if matches.get_flag(id) {
                vec![long.into()]
            } else {
                Vec::new()
            }
        }
        ArgAction::Count => vec![long.into(); usize::from(matches.get_count(id))],
        _ => matches
            .get_raw(id)
            .into_iter()
            .flatten()
            .map(|value| {
                let mut token = OsString::from(format!("{long}="));
                token.push(value);
                token
            })
            .collect(),
    }
}

/// `ConfigArgs`' flags, with their `OSPREY_*` variables: the parser of
/// one layer, which the callers give the variables they read, or none.
fn layer_command() -> clap::Command {
    ConfigArgs::augment_args(
        clap::Command::new("osprey")
            .no_binary_name(true)
            .disable_help_flag(true),
    )
}

/// The parser of electrs' variables: `ELECTRS_<KEY>` for each electrs
/// setting that electrs reads from a variable (all but its files').
fn electrs_variables_command() -> clap::Command {
    layer_command().mut_args(|arg| {
        let variable = electrs_variable(arg.get_id().as_str());
        arg.env(variable)
    })
}

/// electrs' variable for setting `key`, if it has one. The names live in
/// a static, as clap keeps `&'static str`s.
fn electrs_variable(key: &str) -> Option<&'static str> {
    static NAMES: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            electrs::SETTINGS
                .iter()
                .filter(|(key, _)| !FILE_SETTINGS.contains(key))
                .map(|(key, _)| (*key, format!("ELECTRS_{}", key.to_uppercase())))
                .collect()
        })
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, variable)| variable.as_str())
}

/// The settings `command`'s variables (`prefix`) give (no flags).
fn variables(command: clap::Command, prefix: &str) -> anyhow::Result<ConfigArgs> {
    let matches = command
        .try_get_matches_from(Vec::<OsString>::new())
        .map_err(|e| anyhow::anyhow!("{prefix} variables: {}", clap_message(&e)))?;
    Ok(ConfigArgs::from_arg_matches(&matches)?)
}

/// The settings `flags` give (no variables).
fn parse_flags(flags: Vec<OsString>) -> anyhow::Result<ConfigArgs> {
    let command = layer_command().mut_args(|arg| arg.env(Option::<&'static str>::None));
    let matches = command
        .try_get_matches_from(flags)
        .map_err(|e| anyhow::anyhow!("{}", clap_message(&e)))?;
    Ok(ConfigArgs::from_arg_matches(&matches)?)
}

/// clap's message without its `error: ` and its usage lines.
fn clap_message(error: &clap::Error) -> String {
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_string()
}
