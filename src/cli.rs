//! The command line, as clap parses it. `main` resolves it into settings and dispatches.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `fixgate --version`: the package version and the commit it was built from (see build.rs).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    include_str!(concat!(env!("OUT_DIR"), "/commit")),
    ")"
);

/// The most shuffled orders one audit may ask for: each is a full run of the suite, and the
/// orders are held in memory, so a larger number is a typo, not a plan.
pub(crate) const MAX_SEEDS: u64 = 10_000;
/// The most parallel pytest processes (`--jobs`).
pub(crate) const MAX_JOBS: usize = 1024;
/// The longest `--test-timeout`: a week, far beyond any test, and small enough that no deadline
/// computed from it can overflow.
pub(crate) const MAX_TEST_TIMEOUT: u64 = 7 * 24 * 3600;

/// `fixgate --help`: what fixgate is, and the exit codes from `crate::exit`.
fn long_about() -> String {
    format!(
        "Audits a patch to a Python repository's pytest suite and says whether its green is \
         real: order dependence, tests writing shared fixtures they do not own, expected-data \
         fixtures edited together with the code, and new skips.\n\nExit codes: {}.",
        crate::exit::summary()
    )
}

/// `fixgate audit --help`'s first line, with the exit codes from `crate::exit`.
fn audit_about() -> String {
    format!(
        "Audit a patch: is the head's green real? Exit codes: {}",
        crate::exit::summary()
    )
}

/// The headings `--help` groups the options under, in the order a user decides them.
const WHAT: &str = "What to audit";
const HOW_MUCH: &str = "How much";
const WHERE: &str = "Where to run";
const OUTPUT: &str = "Output";
const LIMITS: &str = "Limits";

/// A whole-number option within `min..=max`. Such options take `allow_negative_numbers`, so that
/// `--seeds -3` reaches this parser (clap would read "-3" as an unknown option) and is told what
/// the value must be.
fn whole(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |text: &str| {
        let at_most = match max {
            u64::MAX => String::new(),
            _ => format!(", at most {max}"),
        };
        let must = match min {
            0 => format!("0 or a positive whole number{at_most}"),
            1 => format!("a positive whole number{at_most}"),
            _ => format!("a whole number from {min} to {max}"),
        };
        let t = text.trim();
        if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) && t.len() > 1 {
            return Err(format!("{t} is negative: the value must be {must}"));
        }
        match t.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            Ok(n) => Err(format!("{n} is out of range: the value must be {must}")),
            Err(_) => Err(format!("{t:?} is not a number: the value must be {must}")),
        }
    }
}

/// [`whole`] as a `usize`.
fn whole_usize(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    let parse = whole(min as u64, max as u64);
    move |text: &str| parse(text).map(|n| n as usize)
}

#[derive(Debug, Parser)]
#[command(
    name = "fixgate",
    version = VERSION,
    about = "Audits a patch to a Python repository's pytest suite and says whether its green is real",
    long_about = long_about()
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command accepts, before or after the command name.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// The repository to work on [default: the git root above the current directory]
    #[arg(
        help_heading = WHAT,
        long,
        global = true,
        value_name = "DIR"
    )]
    pub(crate) repo: Option<PathBuf>,
    /// Output format
    #[arg(help_heading = OUTPUT, long, global = true, value_enum, default_value_t = FormatArg::Human)]
    pub(crate) format: FormatArg,
    /// Write the report to FILE instead of standard output
    #[arg(help_heading = OUTPUT, long, global = true, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Cache directory [default: $FIXGATE_CACHE_DIR, else the user cache directory]
    #[arg(help_heading = WHERE, long, global = true, value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// No progress and no warnings on standard error
    #[arg(help_heading = OUTPUT, long, short, global = true)]
    pub(crate) quiet: bool,
    /// The Python interpreter [default: $VIRTUAL_ENV/bin/python, else .venv/bin/python in the
    /// repository, else python3 on PATH]. Runs start the executable it reports
    /// (sys.executable), not a launcher in front of it (a pyenv shim, a wrapper script)
    #[arg(
        help_heading = WHERE,
        long,
        global = true,
        value_name = "PATH"
    )]
    pub(crate) python: Option<PathBuf>,
    /// How many pytest processes may run at once, 1 to 1024 [default: the number of cores]
    #[arg(
        help_heading = WHERE,
        long,
        global = true,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = whole_usize(1, MAX_JOBS)
    )]
    pub(crate) jobs: Option<usize>,
    #[command(flatten)]
    pub(crate) remote: RemoteArgs,
}

/// The shared cache (docs/sharing.md).
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct RemoteArgs {
    /// A remote cache shared across machines: http:// or https:// (Bazel HTTP cache protocol),
    /// grpc:// or grpcs:// (REAPI v2) [default: [tool.fixgate] remote-cache]
    #[arg(
        help_heading = WHERE,
        long,
        global = true,
        value_name = "URL",
        env = "FIXGATE_REMOTE_CACHE"
    )]
    pub(crate) remote_cache: Option<String>,
    /// Write results to the remote cache (only from trusted runs, e.g. CI on the main branch)
    #[arg(help_heading = WHERE, long, global = true)]
    pub(crate) remote_upload: bool,
    /// Fail (exit 2) instead of warning when the remote cache cannot be used
    #[arg(help_heading = WHERE, long, global = true)]
    pub(crate) remote_required: bool,
}

/// `--format` (resolved into [`crate::report::Format`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum FormatArg {
    Human,
    Json,
    /// A pull-request comment (audit only)
    Markdown,
    /// JUnit XML (audit only)
    Junit,
    /// GitHub workflow annotations (audit only)
    Github,
    /// SARIF 2.1.0 for code-scanning UIs (audit only)
    Sarif,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the fixture manifest: every fixture file with its group, blake3 and size
    Manifest(ManifestArgs),
    /// Write fixtures.lock, or check the fixtures against it (exit 3 on drift)
    Lock(LockArgs),
    /// List fixture files added, removed and modified between two snapshots
    Delta(DeltaArgs),
    /// Run the suite once, in one order, in a sandbox; print every test's outcome
    Run(RunArgs),
    /// Run the suite once and show which tests read and wrote which fixture files, and every
    /// lease violation
    Trace(TraceArgs),
    #[command(about = audit_about())]
    Audit(AuditArgs),
    /// Audit the working tree against a base, then again after every save, reusing everything
    /// unchanged; a save during an audit cancels it. One screen (or JSON line) per audit;
    /// Ctrl-C or SIGTERM stops it and exits 0
    Watch(WatchArgs),
    /// Print the build graph of the last audit of this repository, with each node's status
    Graph(GraphArgs),
    /// Print why each executed node of the last audit ran
    Explain,
    /// Inspect and maintain the cache
    Cache(CacheArgs),
    /// Audit a built-in example: an agent's patch that "fixes" a test by matching polluted state
    Demo(DemoArgs),
    /// Set up a repository: run the suite once and propose fixture groups, `writes` markers,
    /// their registration and a first lock (a unified diff); `--apply` writes them
    Init(InitArgs),
    /// Serve remote runs: a Remote Workers API bot for a REAPI service (BuildGrid), for small
    /// setups and tests; production services bring their own workers
    Worker(WorkerArgs),
    /// Print a shell completion script to standard output
    Completions(CompletionsArgs),
    /// Print the man page (roff) to standard output
    Man,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Write the proposed changes into the working tree (without it, nothing is modified)
    #[arg(long)]
    pub(crate) apply: bool,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The service's Bots endpoint: grpc://HOST:PORT or grpcs://HOST:PORT
    #[arg(long, value_name = "URL")]
    pub(crate) server: String,
    /// The REAPI instance to serve [default: the unnamed one]
    #[arg(long, value_name = "NAME", default_value = "")]
    pub(crate) instance: String,
    /// A platform property this worker offers, matched against the actions' (repeatable),
    /// e.g. pool=linux-small
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub(crate) properties: Vec<(String, String)>,
    /// Where actions are materialized [default: a folder in the temporary directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) work_dir: Option<PathBuf>,
    /// The bot's id at the service [default: fixgate-HOSTNAME-PID]
    #[arg(long, value_name = "ID")]
    pub(crate) bot_id: Option<String>,
    /// How actions are contained, as for `fixgate run`: auto, strict, or none (uncontained;
    /// share such a worker only with clients you trust)
    #[arg(long, value_enum, value_name = "MODE", default_value_t = ContainmentArg::Auto)]
    pub(crate) containment: ContainmentArg,
}

/// Where an audit's runs execute (docs/remote-execution.md).
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct RemoteExecArgs {
    /// Execute every pytest run on a REAPI service: grpc://HOST:PORT or grpcs://HOST:PORT
    /// [default: [tool.fixgate] remote-executor of the base]. Without --remote-cache, node
    /// results are looked up in the same service's ActionCache
    #[arg(help_heading = WHERE, long, value_name = "URL")]
    pub(crate) remote_executor: Option<String>,
    /// The service's instance name [default: [tool.fixgate] remote-instance, else none]
    #[arg(help_heading = WHERE, long, value_name = "NAME")]
    pub(crate) remote_instance: Option<String>,
    /// A platform property for every remote run (repeatable), e.g. container-image=docker://…
    /// [default: [tool.fixgate] remote-platform]
    #[arg(help_heading = WHERE, long = "remote-platform", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub(crate) remote_platform: Vec<(String, String)>,
}

/// `KEY=VALUE`, the key not empty.
fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!(
            "expected KEY=VALUE, e.g. container-image=docker://python:3.12; found {text:?}"
        )),
    }
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The base revision the patch applies to (anything git accepts)
    #[arg(help_heading = WHAT, long, value_name = "REV")]
    pub(crate) base: String,
    /// The head revision [default: the working tree]. Repeat it to audit several heads against
    /// one base, sharing every base step: one report per head (JSON Lines with --format json,
    /// one file per head with --output DIR), and the exit code of the most severe verdict
    #[arg(help_heading = WHAT, long, value_name = "REV")]
    pub(crate) head: Vec<String>,
    /// Audit every head listed in FILE (one revision per line; blank lines and # comments are
    /// skipped), as with a repeated --head
    #[arg(help_heading = WHAT, long, value_name = "FILE")]
    pub(crate) heads_from: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) options: AuditOptionArgs,
    /// Run only the K-th of N shares of the seed matrix's orders (and nothing after the
    /// matrix), for CI jobs that share a remote cache (with --remote-upload); exits 0 with a
    /// JSON note of what it ran. A final audit without --shard finds the shards' runs there
    #[arg(help_heading = WHERE, long, value_name = "K/N", allow_hyphen_values = true, value_parser = parse_shard)]
    pub(crate) shard: Option<Shard>,
    /// Also write the report as FORMAT to FILE, from the same audit (repeatable):
    /// `--report junit:fixgate.xml --report markdown:summary.md` beside the --format one. With
    /// several heads, FILE names a folder that gets one report per head
    #[arg(help_heading = OUTPUT, long = "report", value_name = "FORMAT:FILE", value_parser = parse_report)]
    pub(crate) reports: Vec<(FormatArg, PathBuf)>,
    /// A hard deadline for the whole command (90s, 10m, 1h30m; a plain number is seconds):
    /// when it passes, runs are stopped, what finished stays in the cache for the next audit,
    /// and each head not judged is reported unverified (exit 4) with the reason
    #[arg(help_heading = LIMITS, long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) timeout: Option<std::time::Duration>,
}

/// `json:report.json`: a format, then where its report goes.
fn parse_report(text: &str) -> Result<(FormatArg, PathBuf), String> {
    let must = "write FORMAT:FILE, e.g. junit:fixgate.xml, with FORMAT one of human, json, \
                markdown, junit, github, sarif";
    let Some((format, file)) = text.split_once(':') else {
        return Err(format!("{text:?} names no file: {must}"));
    };
    let format = FormatArg::from_str(format, true)
        .map_err(|_| format!("{format:?} is not a report format: {must}"))?;
    if file.is_empty() {
        return Err(format!("{text:?} names no file: {must}"));
    }
    Ok((format, PathBuf::from(file)))
}

/// The longest `--timeout`: a year.
const MAX_TIMEOUT: u64 = 365 * 24 * 3600;

/// A duration as a person writes one: `90s`, `10m`, `1h30m`, `2h 5m`; a plain number is seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let must = "write a positive duration such as 90s, 10m or 1h30m (a plain number is seconds)";
    let secs = match t.parse::<u64>() {
        Ok(n) => n as f64,
        Err(_) => match t.parse::<jiff::SignedDuration>() {
            Ok(d) => d.as_secs_f64(),
            Err(_) => return Err(format!("{t:?} is not a duration: {must}")),
        },
    };
    if secs <= 0.0 {
        return Err(format!("{t} is not after the start: {must}"));
    }
    if secs > MAX_TIMEOUT as f64 {
        return Err(format!("{t} is more than a year: {must}"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// What an audit judges with, shared by `audit` and `watch`.
#[derive(Debug, Args)]
pub(crate) struct AuditOptionArgs {
    /// How many shuffled orders to run after file order and reversed order (seeds 1..N), at
    /// most 10,000
    #[arg(
        help_heading = HOW_MUCH,
        long,
        value_name = "N",
        default_value_t = 8,
        conflicts_with = "seed_list",
        allow_negative_numbers = true,
        value_parser = whole(0, MAX_SEEDS)
    )]
    pub(crate) seeds: u64,
    /// Exactly these seeds for the shuffled orders, e.g. 3,5,8 (at most 10,000 of them)
    #[arg(
        help_heading = HOW_MUCH,
        long,
        value_name = "LIST",
        value_delimiter = ',',
        num_args = 1..=MAX_SEEDS as usize,
        allow_negative_numbers = true,
        value_parser = whole(0, u64::MAX)
    )]
    pub(crate) seed_list: Option<Vec<u64>>,
    /// Reject pre-existing findings too (findings the base already has)
    #[arg(help_heading = WHAT, long)]
    pub(crate) strict: bool,
    /// Make the source-side findings (special-cased-input, eq-ignores-argument,
    /// swallowed-error) unverify the audit instead of warning [default: `[tool.fixgate]
    /// source-checks` of the base, else warn]
    #[arg(help_heading = WHAT, long)]
    pub(crate) strict_source: bool,
    /// Add the nio order: every test run twice in a row in the same process. A test that
    /// passes and then fails, and does so again on 3 reruns of it twice by itself, is a
    /// `non-idempotent` finding (it pollutes its own state); one that does not every time is
    /// flaky [default: `[tool.fixgate] nio` of the base, else off]
    #[arg(help_heading = HOW_MUCH, long)]
    pub(crate) nio: bool,
    /// Impact-scoped audit: the file-order and reversed runs record what each test ran and left
    /// changed, and the shuffled orders run only what the patch can affect, the rest carried
    /// (see docs/impact.md) [default: `[tool.fixgate] scoped` of the base, else off]
    #[arg(help_heading = HOW_MUCH, long, conflicts_with = "full")]
    pub(crate) scoped: bool,
    /// Run every shuffled order over the whole selection, even where `[tool.fixgate] scoped`
    /// asks for impact-scoped audits
    #[arg(help_heading = HOW_MUCH, long)]
    pub(crate) full: bool,
    /// Ignore the cache: run every step
    #[arg(help_heading = HOW_MUCH, long)]
    pub(crate) no_cache: bool,
    /// Re-execute cached seed runs and list every test whose outcome differs (nondeterminism)
    #[arg(help_heading = HOW_MUCH, long)]
    pub(crate) check: bool,
    /// How run dependencies are tracked: traced (what the audit hooks saw) or conservative
    /// (every fixture file is a dependency of every run) [default: from pyproject.toml]
    #[arg(help_heading = HOW_MUCH, long, value_name = "MODE")]
    pub(crate) deps: Option<DepsArg>,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// Budget: the most wall seconds the audit may take
    #[arg(help_heading = LIMITS, long, value_name = "N", allow_negative_numbers = true, value_parser = whole(0, u64::MAX))]
    pub(crate) max_seconds: Option<u64>,
    /// Budget: the most tests the head may have
    #[arg(help_heading = LIMITS, long, value_name = "N", allow_negative_numbers = true, value_parser = whole(0, u64::MAX))]
    pub(crate) max_tests: Option<u64>,
    /// Budget: the most frozen tests
    #[arg(help_heading = LIMITS, long, value_name = "N", allow_negative_numbers = true, value_parser = whole(0, u64::MAX))]
    pub(crate) max_frozen: Option<u64>,
    /// Budget: the most new skip/skipif/xfail markers [default: 0]
    #[arg(help_heading = LIMITS, long, value_name = "N", allow_negative_numbers = true, value_parser = whole(0, u64::MAX))]
    pub(crate) max_new_skips: Option<u64>,
    /// Budget: the most reruns (pytest-rerunfailures and the like)
    #[arg(help_heading = LIMITS, long, value_name = "N", allow_negative_numbers = true, value_parser = whole(0, u64::MAX))]
    pub(crate) max_reruns: Option<u64>,
    /// The date freeze entries are judged against, YYYY-MM-DD [default: today, UTC]
    #[arg(long, value_name = "DATE", hide = true)]
    pub(crate) today: Option<String>,
    /// Boxed: the other commands' arguments are far smaller.
    #[command(flatten)]
    pub(crate) remote_exec: Box<RemoteExecArgs>,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The base revision the working tree is audited against (anything git accepts), resolved
    /// again for every audit
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    pub(crate) base: String,
    /// How long the tree must stay quiet after a change before the next audit starts, in
    /// milliseconds (an editor's save is several events)
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 100,
        value_parser = clap::value_parser!(u64).range(10..=60_000)
    )]
    pub(crate) debounce: u64,
    #[command(flatten)]
    pub(crate) options: AuditOptionArgs,
}

/// `--shard K/N`: the K-th (1-based) of N shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) k: u32,
    pub(crate) n: u32,
}

fn parse_shard(text: &str) -> Result<Shard, String> {
    let usage = || format!("expected K/N with 1 <= K <= N <= 10000, e.g. 2/3; found {text:?}");
    let (k, n) = text.split_once('/').ok_or_else(usage)?;
    let (k, n): (u32, u32) = (
        k.trim().parse().map_err(|_| usage())?,
        n.trim().parse().map_err(|_| usage())?,
    );
    if k == 0 || k > n || n > 10_000 {
        return Err(usage());
    }
    Ok(Shard { k, n })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum DepsArg {
    Traced,
    Conservative,
}

#[derive(Debug, Args)]
pub(crate) struct GraphArgs {
    /// Graphviz DOT instead of a table
    #[arg(long)]
    pub(crate) dot: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CacheArgs {
    #[command(subcommand)]
    pub(crate) action: CacheAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum CacheAction {
    /// Entries and bytes per area, and the last audit's hits, misses and bytes moved
    Stats,
    /// Check every entry; remove the bad ones
    Verify,
    /// Remove least recently used entries beyond a size or an age
    Gc {
        /// Keep at most this much, e.g. 500M, 2G
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
        /// Remove entries unused for this many days (at most 36,500)
        #[arg(
            long,
            value_name = "DAYS",
            allow_negative_numbers = true,
            value_parser = whole(0, 36_500)
        )]
        max_age: Option<u64>,
    },
    /// Remove everything
    Clear,
    /// Upload the local results of the last audit to the remote cache (--remote-cache)
    Push,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Keep the example repository here instead of a temporary directory
    #[arg(long, value_name = "DIR")]
    pub(crate) keep: Option<PathBuf>,
}

/// How a pytest process is set up.
#[derive(Clone, Debug, Args)]
pub(crate) struct SandboxArgs {
    /// Pass this environment variable into the runs (repeatable); everything outside a small
    /// allowlist (PATH, LANG, LC_*) is scrubbed
    #[arg(help_heading = WHERE, long = "pass-env", value_name = "NAME")]
    pub(crate) pass_env: Vec<String>,
    /// Kill a test (and its process group) that runs longer than this, record it as timeout,
    /// and go on with the rest of the order; a pytest process that spends as long outside any
    /// test (collecting, starting or ending its session) is killed too, and says why
    #[arg(
        help_heading = LIMITS,
        long,
        value_name = "SECS",
        default_value_t = 300,
        allow_negative_numbers = true,
        value_parser = whole(1, MAX_TEST_TIMEOUT)
    )]
    pub(crate) test_timeout: u64,
    /// Let tests use the network. By default each run gets a network namespace with only
    /// loopback where namespaces are permitted, and no TCP or UDP at all under Landlock
    #[arg(help_heading = WHERE, long)]
    pub(crate) allow_network: bool,
    /// auto: contain runs in namespaces where the platform permits them, else with Landlock,
    /// else refuse (exit 2); strict: namespaces, or Landlock with every file and TCP rule
    /// enforced, else refuse; none: run uncontained, with a private cache and no remote cache
    #[arg(
        help_heading = WHERE,
        long,
        value_enum,
        value_name = "MODE",
        env = "FIXGATE_CONTAINMENT",
        default_value_t = ContainmentArg::Auto
    )]
    pub(crate) containment: ContainmentArg,
    /// Let runs read this absolute path outside the repository (repeatable), as
    /// [tool.fixgate] read-paths does: a data folder the suite needs, which containment hides
    #[arg(help_heading = WHERE, long = "read-path", value_name = "PATH", value_parser = absolute_path)]
    pub(crate) read_paths: Vec<PathBuf>,
    /// Bound each process of a run to this much memory (address space), e.g. 4G, or
    /// unlimited [default: [tool.fixgate.limits] memory, else the machine's memory divided by
    /// --jobs]
    #[arg(help_heading = LIMITS, long, value_name = "SIZE", value_parser = crate::limits::size_arg)]
    pub(crate) memory_limit: Option<u64>,
    /// Bound a run to this many processes and threads at once, or unlimited [default:
    /// [tool.fixgate.limits] processes, else 4096]
    #[arg(help_heading = LIMITS, long, value_name = "N", value_parser = crate::limits::count_arg)]
    pub(crate) process_limit: Option<u64>,
    /// Bound what a run writes (any one file, its sandbox, its /tmp and /dev/shm) to this
    /// much, e.g. 8G, or unlimited [default: [tool.fixgate.limits] disk, else half a job's
    /// share of the free space, at most 16G]
    #[arg(help_heading = LIMITS, long, value_name = "SIZE", value_parser = crate::limits::size_arg)]
    pub(crate) disk_limit: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ContainmentArg {
    Auto,
    Strict,
    None,
}

impl ContainmentArg {
    pub(crate) fn choice(self) -> crate::contain::Choice {
        match self {
            ContainmentArg::Auto => crate::contain::Choice::Auto,
            ContainmentArg::Strict => crate::contain::Choice::Strict,
            ContainmentArg::None => crate::contain::Choice::None,
        }
    }
}

impl Command {
    /// The containment a command that runs tests asks for (`None` for the others).
    pub(crate) fn containment(&self) -> Option<ContainmentArg> {
        let sandbox = match self {
            Command::Run(a) => &a.sandbox,
            Command::Trace(a) => &a.sandbox,
            Command::Init(a) => &a.sandbox,
            Command::Audit(a) => &a.options.sandbox,
            Command::Watch(a) => &a.options.sandbox,
            _ => return None,
        };
        Some(sandbox.containment)
    }
}

/// A path given on the command line that must be absolute.
fn absolute_path(s: &str) -> std::result::Result<PathBuf, String> {
    match s.starts_with('/') {
        true => Ok(PathBuf::from(s)),
        false => Err(format!(
            "{s:?} is not an absolute path; write e.g. /data/corpus"
        )),
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The order: 0 is file (collection) order, any other seed a shuffle of the non-serial tests
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "order",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = whole(0, u64::MAX)
    )]
    pub(crate) seed: u64,
    /// Run exactly these node ids, one per line, in this order
    #[arg(long, value_name = "FILE")]
    pub(crate) order: Option<PathBuf>,
    /// Run the tests of this revision [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub(crate) rev: Option<String>,
    /// Record per test the repository's code it ran and the shared state it left changed, as a
    /// scoped audit's file-order run does (see docs/impact.md)
    #[arg(long)]
    pub(crate) record: bool,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// Trace the tests of this revision [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub(crate) rev: Option<String>,
    /// The order to trace in (0: file order)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = whole(0, u64::MAX)
    )]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ManifestArgs {
    /// Read the fixtures of this revision from git objects [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub(crate) rev: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// Compare the fixtures with the lock instead of writing it; exit 3 on any drift. Reads
    /// fixgate's lock and SHA-256 locks teams already keep (a flat map, or a files manifest)
    #[arg(long, conflicts_with = "migrate")]
    pub(crate) check: bool,
    /// Rewrite a SHA-256 lock in fixgate's format, after checking that the fixtures match it
    /// (exit 3 and no rewrite when they do not)
    #[arg(long)]
    pub(crate) migrate: bool,
    /// Take the fixtures of this revision [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub(crate) rev: Option<String>,
    /// The lock file [default: `[tool.fixgate] lock`, else fixtures.lock, else
    /// tests/fixtures.lock.json, in the repository]
    #[arg(long, value_name = "FILE")]
    pub(crate) lock: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct DeltaArgs {
    /// The base revision (anything git accepts: HEAD~1, a tag, a sha)
    pub(crate) base: String,
    /// The head revision [default: the working tree]
    pub(crate) head: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_written_as_a_person_writes_a_duration() {
        let secs = |t: &str| parse_duration(t).map(|d| d.as_secs_f64());
        assert_eq!(secs("90"), Ok(90.0));
        assert_eq!(secs("90s"), Ok(90.0));
        assert_eq!(secs("10m"), Ok(600.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("2h 5m"), Ok(7500.0));
        assert_eq!(secs("1.5s"), Ok(1.5));
        for bad in ["0", "0s", "-5m", "soon", "", "400d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("90s, 10m or 1h30m"), "{bad}: {e}");
        }
    }

    /// `audit --help` groups its options under five headings, in the order a user decides them,
    /// and leaves none of them in clap's catch-all "Options".
    #[test]
    fn audit_help_groups_every_option_under_a_heading() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        cli.build();
        let audit = cli.find_subcommand_mut("audit").unwrap();
        let headings = [WHAT, HOW_MUCH, WHERE, LIMITS, OUTPUT];
        for arg in audit.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            let heading = arg.get_help_heading();
            assert!(
                heading.is_some_and(|h| headings.contains(&h)),
                "--{id} is under {heading:?}"
            );
        }
        let help = audit.render_long_help().to_string();
        let at: Vec<usize> = headings
            .iter()
            .map(|h| {
                help.find(&format!("{h}:"))
                    .unwrap_or_else(|| panic!("{h} in {help}"))
            })
            .collect();
        assert!(at.is_sorted(), "headings out of order: {at:?}\n{help}");
    }

    #[test]
    fn a_negative_count_is_told_it_must_be_positive() {
        let jobs = whole(1, 1024);
        assert_eq!(jobs("8"), Ok(8));
        let negative = jobs("-1").unwrap_err();
        assert!(
            negative.contains("must be a positive whole number"),
            "{negative}"
        );
        assert!(jobs("0").unwrap_err().contains("out of range"));
        assert!(jobs("x").unwrap_err().contains("not a number"));
        let seeds = whole(0, u64::MAX);
        assert_eq!(seeds("0"), Ok(0));
        let negative = seeds("-3").unwrap_err();
        assert_eq!(
            negative,
            "-3 is negative: the value must be 0 or a positive whole number"
        );
    }

    #[test]
    fn clap_hands_negative_numbers_to_the_parsers() {
        let err = Cli::try_parse_from(["fixgate", "audit", "--base", "HEAD", "--seeds", "-3"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("-3 is negative"), "{err}");
        let err = Cli::try_parse_from(["fixgate", "--jobs", "-1", "run"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("-1 is negative"), "{err}");
    }
}
