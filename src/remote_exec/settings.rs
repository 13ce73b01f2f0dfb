//! Where runs execute remotely: the command line's `--remote-executor`, `--remote-instance`
//! and `--remote-platform` over the base's `[tool.fixgate]`, and the request headers; the
//! service as the audit's remote cache too.

use std::time::Duration;

use fixgate_cache::RemoteConfig;

use crate::config::RemoteExecConfig;
use crate::error::{Error, Result};

/// Where runs execute remotely, resolved from the command line and the base's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `grpc://HOST:PORT` or `grpcs://HOST:PORT`.
    pub(crate) url: String,
    pub(crate) instance: String,
    /// The user's platform properties (`--remote-platform KEY=VALUE`).
    pub(crate) platform: Vec<(String, String)>,
    /// Request headers (`FIXGATE_REMOTE_HEADER`). Secret.
    pub(crate) headers: Vec<(String, String)>,
}

/// Remote actions in flight by default: the service's workers, not this machine's cores, are
/// what runs them.
pub(crate) const DEFAULT_JOBS: usize = 32;

/// What the command line asks of remote execution: the three settings (those unset come from
/// the base's `[tool.fixgate]`) and the request headers (`FIXGATE_REMOTE_HEADER`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Asked {
    pub(crate) flags: RemoteExecConfig,
    /// Secret.
    pub(crate) headers: Vec<(String, String)>,
}

/// The settings: the flags, else the base's `[tool.fixgate]`; `None` when no executor is named.
pub(crate) fn resolve(asked: &Asked, base: &RemoteExecConfig) -> Result<Option<Settings>> {
    let args = &asked.flags;
    let url = match &args.executor {
        Some(u) => Some(u.trim().to_owned()).filter(|u| !u.is_empty()),
        None => base.executor.clone(),
    };
    let Some(url) = url else {
        if args.instance.is_some() || !args.platform.is_empty() {
            return Err(Error::Usage(
                "--remote-instance and --remote-platform need --remote-executor URL (or \
                 [tool.fixgate] remote-executor in the base)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if !(url.starts_with("grpc://") || url.starts_with("grpcs://")) {
        return Err(Error::Usage(format!(
            "--remote-executor {url:?}: expected grpc://HOST:PORT or grpcs://HOST:PORT (REAPI \
             over gRPC), e.g. grpcs://remote.buildbuddy.io"
        )));
    }
    Ok(Some(Settings {
        url: url.trim_end_matches('/').to_owned(),
        instance: args
            .instance
            .clone()
            .or_else(|| base.instance.clone())
            .unwrap_or_default(),
        platform: match args.platform.is_empty() {
            true => base.platform.clone(),
            false => args.platform.clone(),
        },
        headers: asked.headers.clone(),
    }))
}

impl Settings {
    /// The service as the audit's remote cache (never uploaded to: `--remote-upload` goes with
    /// `--remote-cache`).
    pub(crate) fn as_cache(&self) -> crate::store::RemoteSettings {
        crate::store::RemoteSettings {
            config: self.config(fixgate_cache::DEFAULT_REQUEST_TIMEOUT),
            required: false,
        }
    }

    /// The service as a remote cache URL (`grpc://HOST:PORT/INSTANCE`): the ActionCache node
    /// results go to when no `--remote-cache` is set.
    pub(crate) fn cache_url(&self) -> String {
        match self.instance.is_empty() {
            true => self.url.trim_end_matches('/').to_owned(),
            false => format!("{}/{}", self.url.trim_end_matches('/'), self.instance),
        }
    }

    /// The connection's settings, each request bounded by `request_timeout`.
    pub(crate) fn config(&self, request_timeout: Duration) -> RemoteConfig {
        let mut c = RemoteConfig::new(self.cache_url());
        c.headers = self.headers.clone();
        c.request_timeout = request_timeout;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(executor: Option<&str>, instance: Option<&str>, platform: &[(&str, &str)]) -> Asked {
        Asked {
            flags: RemoteExecConfig {
                executor: executor.map(str::to_owned),
                instance: instance.map(str::to_owned),
                platform: platform
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
            headers: vec![("authorization".into(), "secret".into())],
        }
    }

    #[test]
    fn the_flags_win_over_the_bases_settings_each_on_its_own() {
        let base = RemoteExecConfig {
            executor: Some("grpc://base:1".into()),
            instance: Some("main".into()),
            platform: vec![("pool".into(), "base".into())],
        };
        let s = resolve(&asked(None, None, &[]), &base).unwrap().unwrap();
        assert_eq!(
            (s.url.as_str(), s.instance.as_str(), s.platform.as_slice()),
            (
                "grpc://base:1",
                "main",
                &[("pool".to_owned(), "base".to_owned())][..]
            )
        );
        assert_eq!(s.cache_url(), "grpc://base:1/main");
        assert_eq!(
            s.headers,
            [("authorization".to_owned(), "secret".to_owned())]
        );
        let s = resolve(
            &asked(Some(" grpcs://flag:2/ "), None, &[("pool", "x")]),
            &base,
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.url, "grpcs://flag:2");
        assert_eq!(s.instance, "main", "an unset flag takes the base's");
        assert_eq!(s.platform, [("pool".to_owned(), "x".to_owned())]);
        // An empty --remote-executor turns the base's off.
        let none = resolve(&asked(Some(""), None, &[]), &base).unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn settings_without_an_executor_or_with_another_scheme_are_usage_errors() {
        let none = RemoteExecConfig::default();
        assert!(resolve(&asked(None, None, &[]), &none).unwrap().is_none());
        let err = resolve(&asked(None, Some("main"), &[]), &none).unwrap_err();
        assert!(matches!(err, Error::Usage(_)), "{err}");
        assert!(err.to_string().contains("need --remote-executor"), "{err}");
        let err = resolve(&asked(Some("http://cache:8080"), None, &[]), &none).unwrap_err();
        assert!(
            err.to_string().contains("expected grpc://HOST:PORT"),
            "{err}"
        );
        let s = resolve(&asked(Some("grpc://h:1"), None, &[]), &none)
            .unwrap()
            .unwrap();
        assert_eq!(s.cache_url(), "grpc://h:1", "no instance, no path");
    }
}
