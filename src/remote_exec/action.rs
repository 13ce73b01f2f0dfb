//! One run as a REAPI Action: the launcher started by the interpreter's name, the complete
//! environment with its paths inside the input root, the output directory the event streams
//! come back in, the platform (the user's pairs and the interpreter's identity), the timeout
//! and a salt that carries fixgate's schema.
//!
//! The input root of every run:
//!
//! ```text
//! tree/        the snapshot (with the run's overlay): the directory pytest runs in
//! home/ tmp/   empty: HOME and TMPDIR
//! .fixgate/    the plugin and the launcher
//! order.txt    the order (absent for a run in collection order)
//! watch.json   the fixture roots the lease check watches
//! out/         made by the launcher: the event streams, pytest's output, run.json
//! ```

use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::protobuf::Duration as ProtoDuration;

use crate::pytest::interpreter::Fingerprint;

/// Where the plugin and the launcher are in the input root.
pub(crate) const TOOLS_DIR: &str = ".fixgate";
/// The launcher's file name in [`TOOLS_DIR`].
pub(crate) const LAUNCHER: &str = "fixgate_launch.py";
/// The launcher's source.
pub(crate) const LAUNCHER_SOURCE: &str = include_str!("launcher.py");
/// The output directory of every run.
pub(crate) const OUT_DIR: &str = "out";
/// The launcher's summary in [`OUT_DIR`].
pub(crate) const RUN_FILE: &str = "run.json";
/// The order file and the watch file in the input root.
pub(crate) const ORDER_FILE: &str = "order.txt";
pub(crate) const WATCH_FILE: &str = "watch.json";

/// The platform property naming the interpreter a run needs: its version and a digest of its
/// version, pytest and installed distributions (no path: the worker's may differ).
pub(crate) const INTERPRETER_PROPERTY: &str = "fixgate-interpreter";
/// The platform property a run that may use the network carries (`--allow-network`).
pub(crate) const NETWORK_PROPERTY: &str = "fixgate-network";

/// The interpreter a run needs, for its platform: the version, then a digest of the version,
/// pytest and every installed distribution (not the path, which may differ on the worker).
pub(crate) fn interpreter_identity(fp: &Fingerprint) -> String {
    let mut h = blake3::Hasher::new_derive_key("fixgate remote interpreter v1");
    for part in [&fp.version, &fp.pytest] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    for (n, v) in &fp.distributions {
        for part in [n, v] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    let version = fp.version.split_whitespace().next().unwrap_or("unknown");
    format!("{version}-{}", &h.finalize().to_hex()[..32])
}

/// The interpreter's name on the worker: `python3.11` for a 3.11 interpreter.
pub(crate) fn interpreter_name(fp: &Fingerprint) -> String {
    let version = fp.version.split_whitespace().next().unwrap_or("3");
    let minor: Vec<&str> = version.split('.').take(2).collect();
    format!("python{}", minor.join("."))
}

/// The salt of an action: another fixgate schema never shares its result, nor does another
/// repetition of the same run (repetitions are separate processes: the service must not answer
/// the second from the first's result, or a flaky test would look steady).
pub(crate) fn salt(repeat: u32) -> Vec<u8> {
    format!(
        "fixgate-exec v1 cache-schema {} repeat {repeat}",
        fixgate_cache::SCHEMA
    )
    .into_bytes()
}

/// The longest action timeout: BuildGrid's default `max-execution-timeout` (larger ones are
/// refused by it), two hours. A run is bounded per test by the launcher long before.
pub(crate) const MAX_ACTION_TIMEOUT: Duration = Duration::from_secs(7200);

/// Everything that makes one run's Command and Action, typed.
#[derive(Clone, Debug)]
pub(crate) struct RunSpec {
    /// The interpreter as the worker finds it on PATH, e.g. `python3.11`.
    pub(crate) interpreter: String,
    /// pytest's arguments (the plugin and fixgate's options; the launcher adds the paths).
    pub(crate) pytest_args: Vec<String>,
    /// Every variable the run sees, paths relative to the input root.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) test_timeout: Duration,
    /// How many tests the order holds (the action's timeout grows with it).
    pub(crate) tests: usize,
    /// Whether the input root holds an order file (else: collection order).
    pub(crate) ordered: bool,
    /// Which repetition of the same run this is (0: the first).
    pub(crate) repeat: u32,
    /// The platform properties, unsorted.
    pub(crate) platform: Vec<(String, String)>,
    /// The output directory is named with `output_paths` (REAPI 2.1 and later) or the
    /// deprecated `output_directories`.
    pub(crate) output_paths: bool,
}

impl RunSpec {
    /// The Command: the launcher, run by the interpreter's name, from the input root.
    pub(crate) fn command(&self) -> reapi::Command {
        let mut arguments = vec![
            self.interpreter.clone(),
            format!("{TOOLS_DIR}/{LAUNCHER}"),
            "--test-timeout".to_owned(),
            self.test_timeout.as_secs().to_string(),
            "--watch".to_owned(),
            WATCH_FILE.to_owned(),
        ];
        if self.ordered {
            arguments.extend(["--order".to_owned(), ORDER_FILE.to_owned()]);
        }
        arguments.push("--".to_owned());
        arguments.extend(self.pytest_args.iter().cloned());
        let mut env = self.env.clone();
        env.sort();
        env.dedup_by(|a, b| a.0 == b.0);
        let (output_paths, output_directories) = match self.output_paths {
            true => (vec![OUT_DIR.to_owned()], Vec::new()),
            false => (Vec::new(), vec![OUT_DIR.to_owned()]),
        };
        #[expect(
            deprecated,
            reason = "servers before REAPI 2.1 know only output_directories"
        )]
        reapi::Command {
            arguments,
            environment_variables: env
                .into_iter()
                .map(|(name, value)| reapi::command::EnvironmentVariable { name, value })
                .collect(),
            output_paths,
            output_directories,
            // Also in the Command for servers before REAPI 2.2, which read it only there.
            platform: Some(self.platform()),
            ..Default::default()
        }
    }

    /// The platform, sorted by name and value as REAPI requires.
    pub(crate) fn platform(&self) -> reapi::Platform {
        let mut pairs = self.platform.clone();
        pairs.sort();
        pairs.dedup();
        reapi::Platform {
            properties: pairs
                .into_iter()
                .map(|(name, value)| reapi::platform::Property { name, value })
                .collect(),
        }
    }

    /// The whole run's bound: every test at its timeout, and one more for collection and the
    /// processes' start-up, at most [`MAX_ACTION_TIMEOUT`].
    pub(crate) fn timeout(&self) -> Duration {
        let tests = u32::try_from(self.tests.saturating_add(1)).unwrap_or(u32::MAX);
        self.test_timeout
            .saturating_mul(tests)
            .min(MAX_ACTION_TIMEOUT)
    }

    /// The Action, given the digests of its Command and input root.
    pub(crate) fn action(
        &self,
        command: &fixgate_cache::RemoteDigest,
        input_root: &fixgate_cache::RemoteDigest,
        do_not_cache: bool,
    ) -> reapi::Action {
        reapi::Action {
            command_digest: Some(command.to_proto()),
            input_root_digest: Some(input_root.to_proto()),
            timeout: Some(ProtoDuration {
                seconds: i64::try_from(self.timeout().as_secs()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            do_not_cache,
            salt: salt(self.repeat),
            platform: Some(self.platform()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(version: &str, dists: &[(&str, &str)]) -> Fingerprint {
        Fingerprint {
            distributions: dists
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            executable: "/usr/bin/python3".into(),
            pytest: "8.3.0".into(),
            version: version.into(),
        }
    }

    #[test]
    fn the_interpreter_is_named_by_version_and_identified_without_its_path() {
        let a = fp(
            "3.11.2 (main, Mar 13 2023) [GCC 12.2.0]",
            &[("pytest", "8.3.0")],
        );
        assert_eq!(interpreter_name(&a), "python3.11");
        let mut moved = a.clone();
        moved.executable = "/opt/venv/bin/python".into();
        assert_eq!(interpreter_identity(&a), interpreter_identity(&moved));
        assert!(interpreter_identity(&a).starts_with("3.11.2-"));
        let other = fp(
            "3.11.2 (main, Mar 13 2023) [GCC 12.2.0]",
            &[("pytest", "8.2.0")],
        );
        assert_ne!(interpreter_identity(&a), interpreter_identity(&other));
    }

    fn spec() -> RunSpec {
        RunSpec {
            interpreter: "python3.11".into(),
            pytest_args: vec!["-p".into(), "fixgate_plugin".into()],
            env: vec![
                ("TZ".into(), "UTC".into()),
                ("HOME".into(), "home".into()),
                ("PYTHONHASHSEED".into(), "0".into()),
            ],
            test_timeout: Duration::from_secs(60),
            tests: 3,
            ordered: true,
            repeat: 0,
            platform: vec![
                ("pool".into(), "blue".into()),
                (INTERPRETER_PROPERTY.into(), "3.11.2-ab".into()),
            ],
            output_paths: true,
        }
    }

    #[test]
    fn the_command_names_the_interpreter_and_sorts_what_reapi_wants_sorted() {
        let c = spec().command();
        assert_eq!(c.arguments[0], "python3.11");
        assert!(c.arguments.iter().all(|a| !a.starts_with('/')), "{c:?}");
        let names: Vec<&str> = c
            .environment_variables
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(names, ["HOME", "PYTHONHASHSEED", "TZ"]);
        #[expect(
            deprecated,
            reason = "the Command's platform is what older servers read"
        )]
        let platform = c.platform.as_ref();
        let props: Vec<&str> = platform
            .unwrap()
            .properties
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(props, [INTERPRETER_PROPERTY, "pool"]);
        assert_eq!(c.output_paths, [OUT_DIR]);
    }

    #[test]
    fn the_timeout_covers_every_test_and_stays_under_the_servers_maximum() {
        let mut s = spec();
        assert_eq!(s.timeout(), Duration::from_secs(240));
        s.tests = 1_000_000;
        assert_eq!(s.timeout(), MAX_ACTION_TIMEOUT);
        let d = fixgate_cache::DigestFunction::Sha256.digest(b"x");
        let a = s.action(&d, &d, false);
        assert_eq!(a.timeout.unwrap().seconds, 7200);
        assert!(String::from_utf8(a.salt.clone())
            .unwrap()
            .contains("fixgate-exec"));
        s.repeat = 1;
        assert_ne!(
            s.action(&d, &d, false).salt,
            a.salt,
            "a repetition is another action"
        );
    }
}
