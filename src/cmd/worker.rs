//! `fixgate worker`: serves a REAPI service's leases until interrupted (see
//! `remote_exec::worker`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::cli::WorkerArgs;
use crate::context::stderr_line;
use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::remote_exec::worker::{serve, WorkerConfig};

pub(crate) fn run(args: &WorkerArgs, env: Environment) -> Result<i32> {
    let env = Arc::new(env);
    // Every run is contained as a local one is: refused where it cannot be (unless
    // --containment none), and what does not hold said once.
    let host = Arc::new(crate::contain::Host::probe(&env, args.containment.choice()));
    if let Some(why) = host.check()? {
        stderr_line(&format!(
            "fixgate worker: warning: {why}; share this worker only with clients you trust"
        ));
    }
    let bot_id = args
        .bot_id
        .clone()
        .unwrap_or_else(|| format!("fixgate-{}-{}", hostname(), std::process::id()));
    let work_dir = args.work_dir.clone().unwrap_or_else(|| {
        env.temp_dir
            .join(format!("fixgate-worker-{}", std::process::id()))
    });
    let cache_dir = env
        .cache_dir
        .clone()
        .or_else(|| env.xdg_cache_home.as_ref().map(|d| d.join("fixgate")))
        .or_else(|| env.home.as_ref().map(|h| h.join(".cache/fixgate")))
        .unwrap_or_else(|| env.temp_dir.join("fixgate-cache"));
    let headers = match &env.remote_header {
        Some(text) => crate::cmd::settings::parse_headers(text)?,
        None => Vec::new(),
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())
            .map_err(|e| Error::Infra(format!("failed to install a signal handler: {e}")))?;
    }
    let config = WorkerConfig {
        server: args.server.clone(),
        instance: args.instance.clone(),
        bot_id: bot_id.clone(),
        properties: args.properties.clone(),
        work_dir: work_dir.clone(),
        cache_dir,
        headers,
    };
    let log = |line: &str| stderr_line(&format!("fixgate worker {bot_id}: {line}"));
    let outcome = serve(config, env, host, interrupted, &log);
    crate::sandbox::remove_tree(&work_dir);
    match outcome {
        Err(Error::Interrupted) => Ok(0),
        Err(e) => Err(e),
        Ok(()) => Ok(0),
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is as long as the length passed.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    match ok && end > 0 {
        true => String::from_utf8_lossy(&buf[..end]).into_owned(),
        false => "host".to_owned(),
    }
}
