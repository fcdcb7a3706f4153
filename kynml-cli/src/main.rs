//! `kynml`: train, check and compare `.kyn` specs; export, predict and evaluate. This file only maps outcomes to
//! exit codes; the work is in the commands.

mod args;
mod bench;
mod check;
mod devices;
mod export;
mod failure;
mod output;
mod predict;
mod reading;
mod render;
mod report;
mod terminal;
mod train;

use std::process::ExitCode;

use clap::Parser;

/// Characters of one word an error message shows at most.
const MAX_WORD: usize = 240;

fn main() -> ExitCode {
    // Output piped into a program that stops reading (`| head`) ends the
    // process quietly, as other command-line tools do, not with a panic.
    // SAFETY: setting a signal's disposition to the default, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A file-size limit (`ulimit -f`, a batch system's) reached makes the
    // write fail with EFBIG, said as a full disk is, instead of the kernel's
    // SIGXFSZ ending the process unannounced with its model unsaved.
    // SAFETY: as above.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    quit_on_output_errors();
    quiet_headless_vulkan();
    let cli = args::Cli::parse();
    // `train` stops on a signal after its step, with its checkpoint (its
    // own handlers); the other commands end at once, their unfinished
    // files removed.
    if !matches!(cli.command, args::Command::Train(_)) {
        remove_unfinished_files_on_signals();
    }
    // Before any device is chosen: the kernel cache of the GPU picked is
    // set up in this folder when it is picked.
    kynml_backend::kernel_cache::choose(cli.cache.as_deref());
    let outcome = match cli.command {
        args::Command::Train(a) => train::run(a),
        args::Command::Check(a) => check::run(a),
        args::Command::Report(a) => report::run(a),
        args::Command::Devices => devices::run(),
        args::Command::Export(a) => export::run(a),
        args::Command::Predict(a) => predict::predict(a),
        args::Command::Eval(a) => predict::eval(a),
        args::Command::Bench(a) => bench::bench(a),
        args::Command::Warmup(a) => bench::warmup(a),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            // A value quoted whole (a data cell or column name of megabytes)
            // is cut in its middle: the message stays one a person reads.
            // Standard error may be gone (`2>&1 | tee log` stopped by the
            // Ctrl-C that stopped the run): the status still says why.
            let said = kynml_core::spec::diagnostic::shorten_words(failure.message.trim_end(), MAX_WORD);
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{said}\n").as_bytes());
            ExitCode::from(failure.code)
        }
    }
}

/// Standard output that cannot be written (`> /dev/full`, a full disk under
/// a redirected log) makes `println!` panic: said as an error, exit 1, not
/// as a panic. Checkpoints already written stay whole (they are only ever
/// replaced by a rename). Other panics go to the default hook.
fn quit_on_output_errors() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text =
            payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        for (stream, name) in [("stdout", "output"), ("stderr", "error")] {
            if let Some(why) = text.and_then(|t| t.strip_prefix(&format!("failed printing to {stream}: ")[..])) {
                // Standard error may be the stream that failed: said where it can be.
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("error: cannot write to standard {name}: {why}\n").as_bytes(),
                );
                std::process::exit(1);
            }
        }
        default(info);
    }));
}

/// Ctrl-C, SIGTERM and SIGHUP end the process as their default does (status
/// 128 + the signal's number), after the files it was writing in the
/// background of their targets are removed: an export or a predict stopped
/// mid-write left a hidden temporary file as large as the output. The
/// signals are blocked in every thread (this runs before any starts) and
/// taken by one that waits for them, where removing files is safe, as it is
/// not in a handler. One ignored at start (`nohup`, a script's `&`) stays
/// ignored.
fn remove_unfinished_files_on_signals() {
    // SAFETY: sigaction(2) to read dispositions, and sigset operations on a
    // zeroed set, a plain C struct; pthread_sigmask before any thread starts.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let mut any = false;
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let mut now: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut now) == 0 && now.sa_sigaction == libc::SIG_DFL {
                libc::sigaddset(&mut set, signal);
                any = true;
            }
        }
        if !any {
            return;
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let waiter = std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut signal = 0;
        // SAFETY: sigwait(3) on the set blocked above.
        if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
            return;
        }
        kynml_core::atomic_file::remove_unfinished();
        // Standard error may be a pipe whose reader the same Ctrl-C ended
        // (`2>&1 | tee`): writing there must not end the process with
        // SIGPIPE's status instead of this signal's.
        // SAFETY: a sigset of one signal, blocked in this thread alone.
        unsafe {
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, std::ptr::null_mut());
        }
        let said = match signal {
            libc::SIGINT => "\ninterrupted (Ctrl-C)\n",
            libc::SIGTERM => "\nterminated (SIGTERM)\n",
            _ => "\nhangup (SIGHUP)\n",
        };
        let _ = std::io::Write::write_all(&mut std::io::stderr(), said.as_bytes());
        // SAFETY: the signal's default action, unblocked in this thread
        // alone and raised at it: the process ends as that signal ends it.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::raise(signal);
        }
    });
    // No thread to take them: the signals act as they did, unblocked.
    if waiter.is_err() {
        // SAFETY: unblocking the set blocked above, in this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

/// Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not set"
/// when probed on a headless host, which reads like a KynML failure. Give
/// this process a private runtime folder, as a login session would, before
/// any thread exists and before any device is probed.
fn quiet_headless_vulkan() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some() {
        return;
    }
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // /proc/self belongs to this process's user: a per-user folder, reused.
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else { return };
    let dir = std::env::temp_dir().join(format!("kynml-runtime-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let ours = std::fs::symlink_metadata(&dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0);
    if ours {
        // Sound: no other thread exists yet.
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}
