//! Real remote-cache servers for the tests: nginx with WebDAV (the Bazel HTTP cache protocol)
//! and BuildGrid in cache-only mode (REAPI), each on a free loopback port, stopped by PID.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server. Dropping it stops it.
pub struct Server {
    /// The URL to pass to `--remote-cache`.
    pub url: String,
    /// Where an nginx server keeps what is PUT (`ac/`, `cas/`).
    pub data: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Stops the server (by its PID) and waits for it, as a server that goes away mid-audit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How many requests an nginx server has answered so far.
    pub fn requests(&self) -> usize {
        std::fs::read_to_string(self.log.with_file_name("access.log"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// The server's log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

fn wait_for_port(port: u16, child: &mut Child, log: &Path, what: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening on port {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not listen on port {port} within {limit:?}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Holds an exclusive lock on `name` under the target directory while installing, so that the
/// test binaries running at once install a server once.
fn install_lock(name: &str) -> std::fs::File {
    use std::os::unix::io::AsRawFd;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(dir).unwrap();
    let lock = std::fs::File::create(dir.join(format!("{name}.lock"))).unwrap();
    // SAFETY: flock on a descriptor this function owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    lock
}

/// `apt-get install PACKAGE`, after `apt-get update` when the first try fails; what it did is
/// checked by the caller.
fn apt_install(package: &str) {
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "-qq", package]) {
        apt(&["update", "-qq"]);
        apt(&["install", "-y", "-qq", package]);
    }
}

fn installed_nginx() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// nginx, installed with apt-get (as `.ci/run` does) when it is missing and this user may.
fn find_nginx() -> PathBuf {
    if let Some(p) = installed_nginx() {
        return p;
    }
    let _lock = install_lock("nginx-install");
    if installed_nginx().is_none() {
        apt_install("nginx");
    }
    installed_nginx().unwrap_or_else(|| {
        panic!(
            "nginx is not installed and `apt-get install nginx` did not install it; the \
             remote-cache tests need it as the HTTP cache: install Debian's nginx (its build has \
             the WebDAV module), or run .ci/run, which installs it"
        )
    })
}

/// nginx serving WebDAV `PUT` and `GET` from a temporary directory.
pub fn nginx() -> Server {
    nginx_with(None)
}

/// [`nginx`] answering 401 to requests without `Authorization: {authorization}`.
pub fn nginx_requiring(authorization: &str) -> Server {
    nginx_with(Some(authorization))
}

fn nginx_with(authorization: Option<&str>) -> Server {
    let nginx = find_nginx();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let log = dir.path().join("error.log");
    // One process (no master, no workers): it runs as the user that starts it, so PUTs can
    // write the data directory (workers started by root run as nobody), and stopping it by PID
    // stops everything.
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 client_max_body_size 0;\n\
         \x20 server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      root {data};\n\
         \x20     dav_methods PUT DELETE;\n      create_full_put_path on;\n\
         \x20     dav_access user:rw group:r all:r;\n    }}\n  }}\n}}\n",
        d = dir.path().display(),
        data = data.display(),
    );
    let check = authorization
        .map(|a| format!("      if ($http_authorization != \"{a}\") {{ return 401; }}\n"))
        .unwrap_or_default();
    let conf = conf.replace("      root ", &format!("{check}      root "));
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut child = Command::new(&nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-e")
        .arg(&log)
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", nginx.display()));
    wait_for_port(port, &mut child, &log, "nginx", Duration::from_secs(20));
    Server {
        url: format!("http://127.0.0.1:{port}/cache"),
        data: data.join("cache"),
        child: Some(child),
        log,
        _dir: dir,
    }
}

/// The `bgd` of BuildGrid 0.4.4 in `target/buildgrid-venv` (installed there with pip when
/// missing, as `.ci/run` does), or `$FIXGATE_TEST_BGD`.
fn find_bgd() -> PathBuf {
    if let Some(p) = std::env::var_os("FIXGATE_TEST_BGD") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/buildgrid-venv");
    let bgd = venv.join("bin/bgd");
    if bgd.exists() {
        return bgd;
    }
    let _lock = install_lock("buildgrid-install");
    if !bgd.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success());
        let _ = made
            && Command::new(venv.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "buildgrid==0.4.4",
                ])
                .status()
                .is_ok_and(|s| s.success());
    }
    if bgd.exists() {
        return bgd;
    }
    panic!(
        "BuildGrid is not installed and pip could not install it; the remote-cache tests need it \
         as the REAPI server: run `python3 -m venv target/buildgrid-venv && \
         target/buildgrid-venv/bin/pip install buildgrid==0.4.4` in the repository (or run \
         .ci/run, which does), or set FIXGATE_TEST_BGD to a bgd executable"
    );
}

/// BuildGrid in cache-only mode: in-memory CAS and action cache, the `cas`, `bytestream` and
/// `action-cache` services, no database. It offers SHA-256 only.
pub fn buildgrid() -> Server {
    let bgd = find_bgd();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = format!(
        "server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
         authorization:\n  method: none\n\
         storages:\n  - !lru-storage &cas\n    size: 256MB\n\
         caches:\n  - !lru-action-cache &ac\n    storage: *cas\n    max-cached-refs: 100000\n\
         \x20   allow-updates: true\n    cache-failed-actions: true\n\
         instances:\n  - name: \"\"\n    services:\n      - !action-cache\n        cache: *ac\n\
         \x20     - !cas\n        storage: *cas\n      - !bytestream\n        storage: *cas\n"
    );
    let conf_path = dir.path().join("buildgrid.yml");
    std::fs::write(&conf_path, conf).unwrap();
    let log = dir.path().join("bgd.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(&bgd)
        .args(["server", "start"])
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bgd.display()));
    wait_for_port(port, &mut child, &log, "BuildGrid", Duration::from_secs(90));
    Server {
        url: format!("grpc://127.0.0.1:{port}"),
        data: dir.path().join("no-data-dir"),
        child: Some(child),
        log,
        _dir: dir,
    }
}

/// The `initdb` and `postgres` of Debian's PostgreSQL (installed with apt-get, as `.ci/run`
/// does, when missing and this user may).
fn find_postgres() -> (PathBuf, PathBuf) {
    let installed = || {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|rd| rd.flatten().map(|e| e.path().join("bin")).collect())
            .unwrap_or_default();
        versions.sort();
        versions
            .into_iter()
            .rev()
            .find(|b| b.join("initdb").exists() && b.join("postgres").exists())
            .map(|b| (b.join("initdb"), b.join("postgres")))
    };
    if let Some(found) = installed() {
        return found;
    }
    let _lock = install_lock("postgresql-install");
    if installed().is_none() {
        apt_install("postgresql");
    }
    installed().unwrap_or_else(|| {
        panic!(
            "PostgreSQL is not installed and `apt-get install postgresql` did not install it; \
             the remote-execution tests need it for BuildGrid's scheduler: install Debian's \
             postgresql (/usr/lib/postgresql/*/bin/initdb), or run .ci/run, which installs it"
        )
    })
}

/// A PostgreSQL server on a free loopback port, its data in a temporary directory, trusting
/// local connections of the user `fixgate`. Dropping it stops it (immediate shutdown by PID).
pub struct Postgres {
    pub port: u16,
    /// Its client, beside the server.
    psql: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// What BuildGrid connects with (psycopg2: its notifier needs that driver).
    pub fn url(&self) -> String {
        format!(
            "postgresql+psycopg2://fixgate@127.0.0.1:{}/postgres",
            self.port
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The one value a query of the database selects (what BuildGrid's scheduler holds: its
    /// jobs table), as psql prints it; the query's failure fails the test with what psql said.
    pub fn select(&self, query: &str) -> String {
        let out = Command::new(&self.psql)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U", "fixgate", "-d", "postgres", "-X", "-t", "-A", "-c", query,
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.psql.display()));
        assert!(
            out.status.success(),
            "psql {query:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGQUIT: the postmaster's immediate shutdown, which ends its backends too.
            unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// As `postgres`: initdb and the server refuse to run as root, so as root they run as the
/// `postgres` user (which the Debian package makes), else as the caller.
fn as_postgres_user(program: &Path) -> Command {
    if unsafe { libc::geteuid() } != 0 {
        return Command::new(program);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(program);
    cmd
}

pub fn postgres() -> Postgres {
    use std::os::unix::fs::PermissionsExt;
    let (initdb, server) = find_postgres();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&data)
            .status()
            .expect("chown runs");
        assert!(status.success(), "chown postgres {}", data.display());
    }
    let log = dir.path().join("postgres.log");
    let out = std::fs::File::create(&log).unwrap();
    let status = as_postgres_user(&initdb)
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "fixgate", "--no-sync", "-E", "UTF8"])
        .stdout(out.try_clone().unwrap())
        .stderr(out.try_clone().unwrap())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", initdb.display()));
    assert!(
        status.success(),
        "initdb failed:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let port = free_port();
    let mut child = as_postgres_user(&server)
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string()])
        // TCP on loopback only, no socket directory to share; durability is not the point.
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
        ])
        .args([
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ])
        .args(["-c", "max_connections=200"])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", server.display()));
    wait_for_port(
        port,
        &mut child,
        &log,
        "PostgreSQL",
        Duration::from_secs(60),
    );
    Postgres {
        port,
        psql: initdb.with_file_name("psql"),
        child: Some(child),
        log,
        _dir: dir,
    }
}

/// BuildGrid's interpreter can import its PostgreSQL driver (`buildgrid[database]`),
/// installed into the venv when it cannot.
fn ensure_psycopg(bgd: &Path) {
    let python = bgd.with_file_name("python");
    let has = |python: &Path| {
        Command::new(python)
            .args(["-c", "import psycopg2"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has(&python) {
        return;
    }
    let _lock = install_lock("buildgrid-install");
    if !has(&python) {
        let _ = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("buildgrid[database]==0.4.4")
            .status();
    }
    assert!(
        has(&python),
        "BuildGrid's PostgreSQL driver is missing and pip could not install it: run \
         `target/buildgrid-venv/bin/python -m pip install 'buildgrid[database]==0.4.4'` (or \
         .ci/run, which does)"
    );
}

/// BuildGrid with its execution service (and Bots) on `pg`'s SQL scheduler, an in-memory CAS
/// and ActionCache. A bot silent for `keepalive` seconds is lost, and BuildGrid queues its job
/// again (0.4.4 parses `max-job-attempts` but never hands it to its scheduler): the client sees
/// the job back in the queue, withdraws it and tries once more. Jobs may ask for `pool`
/// (matched against workers) and carry fixgate's own properties and a container image (for the
/// worker to honour or refuse). BuildGrid takes at most `threads` RPCs at once (its
/// `thread-pool-size`; by default five per core, at least five) and refuses more with
/// RESOURCE_EXHAUSTED; an Execute holds one for as long as its action runs.
pub fn buildgrid_execution(pg: &Postgres, keepalive: u32, threads: Option<u32>) -> Server {
    let bgd = find_bgd();
    ensure_psycopg(&bgd);
    let python = bgd.with_file_name("python");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bgd.log");
    let migrate = Command::new(&python)
        .arg(&bgd)
        .args(["migrate", "apply", &pg.url()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bgd.display()));
    assert!(
        migrate.status.success(),
        "bgd migrate apply failed:\n{}\n{}\nPostgreSQL said:\n{}",
        String::from_utf8_lossy(&migrate.stdout),
        String::from_utf8_lossy(&migrate.stderr),
        pg.log()
    );
    let port = free_port();
    let threads = threads.map_or(String::new(), |n| format!("thread-pool-size: {n}\n"));
    let conf = format!(
        "{threads}server:\n  - !channel\n    address: \"127.0.0.1:{port}\"\n    insecure-mode: true\n\
         authorization:\n  method: none\n\
         connections:\n  - !sql-connection &sql\n    connection-string: {url}\n\
         \x20   pool-size: 10\n    max-overflow: 20\n\
         storages:\n  - !lru-storage &cas\n    size: 512MB\n\
         caches:\n  - !lru-action-cache &ac\n    storage: *cas\n    max-cached-refs: 100000\n\
         \x20   allow-updates: true\n    cache-failed-actions: true\n\
         schedulers:\n  - !sql-scheduler &sched\n    sql: *sql\n    storage: *cas\n\
         \x20   action-cache: *ac\n\
         \x20   property-set: !dynamic-property-set\n\
         \x20     match-property-keys: [pool]\n\
         \x20     wildcard-property-keys: [fixgate-interpreter, fixgate-network, container-image]\n\
         \x20   bot-session-keepalive-timeout: {keepalive}\n\
         \x20   session-expiry-timer-interval: 0.5\n\
         \x20   poll-interval: 0.05\n    bot-poll-interval: 0.05\n\
         instances:\n  - name: \"\"\n    services:\n      - !action-cache\n        cache: *ac\n\
         \x20     - !execution\n        scheduler: *sched\n\
         \x20     - !cas\n        storage: *cas\n      - !bytestream\n        storage: *cas\n",
        url = pg.url(),
    );
    let conf_path = dir.path().join("buildgrid.yml");
    std::fs::write(&conf_path, conf).unwrap();
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(&python)
        .arg(&bgd)
        .args(["server", "start"])
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bgd.display()));
    wait_for_port(
        port,
        &mut child,
        &log,
        "BuildGrid",
        Duration::from_secs(120),
    );
    Server {
        url: format!("grpc://127.0.0.1:{port}"),
        data: dir.path().join("no-data-dir"),
        child: Some(child),
        log,
        _dir: dir,
    }
}

/// A `fixgate worker` serving `server`; dropping it stops it (SIGTERM, then SIGKILL, by PID).
pub struct Worker {
    pub bot_id: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    /// What it printed: one line per lease it ran.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The folder its actions are materialized in, one folder each.
    pub fn work_dir(&self) -> PathBuf {
        self._dir.path().join("work")
    }

    /// How many leases it started.
    pub fn leases(&self) -> usize {
        self.log().matches(": running lease ").count()
    }

    /// Kills it at once (SIGKILL, by PID), as a machine that dies mid-action.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `fixgate worker` for `server` with `properties`, and waits for its session.
pub fn worker(server: &Server, bot_id: &str, properties: &[&str]) -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("worker.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fixgate"));
    cmd.args(["worker", "--server", &server.url, "--bot-id", bot_id])
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .env("FIXGATE_CACHE_DIR", dir.path().join("cache"));
    for p in properties {
        cmd.args(["--property", p]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .expect("start fixgate worker");
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(": session ")
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "fixgate worker exited ({status}) before its session:\n{}\nBuildGrid said:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                server.log()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "fixgate worker made no session within 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Worker {
        bot_id: bot_id.to_owned(),
        child: Some(child),
        log,
        _dir: dir,
    }
}
