//! The command line resolved into settings (ripgrep's low-level arguments into high-level
//! ones): what clap parsed becomes the plain values `Ctx`, the runner and the engine take, so no
//! clap type reaches below `cmd/`.

use std::path::Path;
use std::time::Duration;

use fixgate_cache::{MacKey, RemoteConfig};

use crate::cli::{FormatArg, GlobalArgs, RemoteArgs, RemoteExecArgs, SandboxArgs};
use crate::context::{SandboxSettings, Settings};
use crate::error::{Error, Result};
use crate::report::Format;
use crate::store::RemoteSettings;

/// Request headers for the remote, `Name: value`, one a line. Secret.
const HEADER_ENV: &str = "FIXGATE_REMOTE_HEADER";

/// `--format` (or `--report`'s format) as the report knows it.
pub(crate) fn format(arg: FormatArg) -> Format {
    match arg {
        FormatArg::Human => Format::Human,
        FormatArg::Json => Format::Json,
        FormatArg::Markdown => Format::Markdown,
        FormatArg::Junit => Format::Junit,
        FormatArg::Github => Format::Github,
        FormatArg::Sarif => Format::Sarif,
    }
}

/// The options every command shares.
pub(crate) fn global(args: &GlobalArgs) -> Settings {
    Settings {
        repo: args.repo.clone(),
        format: format(args.format),
        output: args.output.clone(),
        cache_dir: args.cache_dir.clone(),
        quiet: args.quiet,
        python: args.python.clone(),
        jobs: args.jobs,
    }
}

/// How the pytest processes of a command are set up.
pub(crate) fn sandbox(args: &SandboxArgs) -> SandboxSettings {
    SandboxSettings {
        pass_env: args.pass_env.clone(),
        test_timeout: Duration::from_secs(args.test_timeout),
        allow_network: args.allow_network,
        containment: args.containment.choice(),
        read_paths: args.read_paths.clone(),
        limits: crate::limits::LimitArgs {
            memory: args.memory_limit,
            processes: args.process_limit,
            disk: args.disk_limit,
        },
    }
}

/// Resolves the remote settings: `--remote-cache` or `FIXGATE_REMOTE_CACHE`, else
/// `[tool.fixgate] remote-cache` in the working tree's `pyproject.toml`; headers from
/// `FIXGATE_REMOTE_HEADER`, the signing key from `FIXGATE_CACHE_KEY`.
pub(crate) fn remote(
    args: &RemoteArgs,
    repo_root: &Path,
    env: &crate::environment::Environment,
) -> Result<Option<RemoteSettings>> {
    let url = match &args.remote_cache {
        Some(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        Some(_) => None,
        None => {
            let path = repo_root.join(crate::config::PYPROJECT_FILE);
            // A pyproject.toml that does not parse is reported by the commands that load the
            // configuration; here it only means no remote cache is named.
            std::fs::read(&path)
                .ok()
                .and_then(|bytes| crate::config::remote_cache(&bytes).ok().flatten())
        }
    };
    let Some(url) = url else {
        if args.remote_upload || args.remote_required {
            return Err(Error::Usage(
                "--remote-upload and --remote-required need a remote cache: pass --remote-cache \
                 URL, set FIXGATE_REMOTE_CACHE, or set [tool.fixgate] remote-cache"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let mut config = RemoteConfig::new(url);
    config.upload = args.remote_upload;
    if let Some(text) = &env.remote_header {
        config.headers = parse_headers(text)?;
    }
    if let Some(key) = &env.cache_key {
        config.mac_key = Some(MacKey::derive(key.as_bytes()));
    }
    Ok(Some(RemoteSettings {
        config,
        required: args.remote_required,
    }))
}

/// The remote executor the command line names (what it leaves unset comes from the base's
/// `[tool.fixgate]`, read later), with the request headers of `FIXGATE_REMOTE_HEADER`.
pub(crate) fn remote_exec(
    args: &RemoteExecArgs,
    env: &crate::environment::Environment,
) -> Result<crate::remote_exec::client::Asked> {
    Ok(crate::remote_exec::client::Asked {
        flags: crate::config::RemoteExecConfig {
            executor: args.remote_executor.clone(),
            instance: args.remote_instance.clone(),
            platform: args.remote_platform.clone(),
        },
        headers: match &env.remote_header {
            Some(text) => parse_headers(text)?,
            None => Vec::new(),
        },
    })
}

/// `Name: value` lines; errors name the line, never its value.
pub(crate) fn parse_headers(text: &str) -> Result<Vec<(String, String)>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let (name, value) = line.split_once(':').unwrap_or(("", ""));
            let name = name.trim();
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid || value.trim().is_empty() {
                return Err(Error::Usage(format!(
                    "{HEADER_ENV} line {} is not a header; write \"Name: value\", e.g. \
                     \"Authorization: Bearer <token>\"",
                    i + 1
                )));
            }
            Ok((name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_and_errors_never_show_values() {
        assert_eq!(
            parse_headers("Authorization: Bearer abc\n\nX-Team: infra\n").unwrap(),
            vec![
                ("Authorization".to_owned(), "Bearer abc".to_owned()),
                ("X-Team".to_owned(), "infra".to_owned())
            ]
        );
        let err = parse_headers("Bearer sekrit").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(!err.contains("sekrit"), "{err}");
    }
}
