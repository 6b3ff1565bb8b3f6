//! A real terminal for tests of what a person sees: a tmux server of its own (its socket
//! in a fresh directory, so tests running at once never share one) running one program
//! in a window of a given size; killed, and its directory removed, when dropped.

use std::path::PathBuf;
use std::process::Command;

use crate::fresh_dir;

pub struct Terminal {
    dir: PathBuf,
}

impl Terminal {
    /// Starts `command` (a shell command line) in a `width` x `height` window.
    pub fn run(command: &str, width: u16, height: u16) -> Self {
        let terminal = Terminal {
            dir: fresh_dir("tmux"),
        };
        let status = terminal
            .tmux()
            .args([
                "new-session",
                "-d",
                "-x",
                &width.to_string(),
                "-y",
                &height.to_string(),
            ])
            .arg(command)
            .status()
            .expect("tmux (installed by scripts/install-deps.sh --test)");
        assert!(status.success(), "tmux new-session");
        terminal
    }

    /// A tmux command on this terminal's server.
    pub fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(self.dir.join("socket"));
        command
    }

    /// What the window shows now (`capture-pane`).
    pub fn screen(&self) -> String {
        let output = self
            .tmux()
            .args(["capture-pane", "-p"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types `text` as keys.
    pub fn type_text(&self, text: &str) {
        let status = self
            .tmux()
            .args(["send-keys", "-l", text])
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
