//! `bootpool lab --login`: a user logging in on a client's serial line once its getty asks, as
//! someone at the console would, and typing a command there. What to type next for what the
//! console shows is a pure script here; the VM's console thread (`vm.rs`) does the I/O.

use std::str::FromStr;

/// What agetty prints when it asks for a user name (`HOSTNAME login: `).
const LOGIN_PROMPT: &str = " login: ";
/// What login(1) prints when it asks for the password.
const PASSWORD_PROMPT: &str = "Password: ";
/// The end of a POSIX shell's prompt for a user that is not root (`user@host:~$ `), and of
/// root's (`root@host:~# `).
const SHELL_PROMPTS: [&str; 2] = ["$ ", "# "];
/// What login(1) prints when the password is wrong.
const REFUSED: &str = "Login incorrect";

/// `--login USER:PASSWORD`, and `--login-run`'s command.
#[derive(Debug, Clone, PartialEq)]
pub struct Login {
    pub user: String,
    pub password: String,
    /// Typed at the shell's prompt, then `exit`; none: `exit` at once.
    pub run: Option<String>,
}

impl FromStr for Login {
    type Err = String;

    /// `USER:PASSWORD`: the user is 1 to 32 letters, digits, `_`, `-` and `.`; the password
    /// is the rest of the value (it may hold `:`), not empty, on one line.
    fn from_str(s: &str) -> Result<Login, String> {
        let (user, password) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: give USER:PASSWORD"))?;
        let user_ok = (1..=32).contains(&user.len())
            && user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !user_ok {
            return Err(format!(
                "{user:?}: a user name is 1 to 32 letters, digits, `_`, `-` and `.`"
            ));
        }
        if password.is_empty() || password.contains(['\n', '\r']) {
            return Err("the password must be one line, not empty".into());
        }
        Ok(Login {
            user: user.into(),
            password: password.into(),
            run: None,
        })
    }
}

/// Where a login stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Waiting for the getty's prompt, to type the user name.
    User,
    /// Waiting for login's password prompt.
    Password,
    /// Waiting for the shell's prompt, to type the command and `exit`.
    Shell,
    /// Typed everything.
    Done,
    /// The password was refused: nothing more is typed.
    Refused,
}

/// Types a `Login` on one console: give it what the console showed since its last typing.
#[derive(Debug, Clone)]
pub struct Typist {
    login: Login,
    step: Step,
}

impl Typist {
    pub fn new(login: Login) -> Typist {
        Typist {
            login,
            step: Step::User,
        }
    }

    pub fn step(&self) -> Step {
        self.step
    }

    /// What to type now that the console has shown `seen` (all it printed since the last
    /// typing), if anything; a line ends with a carriage return, as a terminal's Enter sends.
    pub fn next(&mut self, seen: &str) -> Option<String> {
        let (typed, step) = match self.step {
            Step::User if seen.contains(LOGIN_PROMPT) => {
                (format!("{}\r", self.login.user), Step::Password)
            }
            Step::Password if seen.contains(REFUSED) => return self.refuse(),
            Step::Password if seen.contains(PASSWORD_PROMPT) => {
                (format!("{}\r", self.login.password), Step::Shell)
            }
            Step::Shell if seen.contains(REFUSED) => return self.refuse(),
            Step::Shell if SHELL_PROMPTS.iter().any(|p| seen.contains(p)) => {
                let typed = match &self.login.run {
                    Some(run) => format!("{run}\rexit\r"),
                    None => "exit\r".into(),
                };
                (typed, Step::Done)
            }
            _ => return None,
        };
        self.step = step;
        Some(typed)
    }

    fn refuse(&mut self) -> Option<String> {
        self.step = Step::Refused;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(run: Option<&str>) -> Login {
        let mut l: Login = "student:pa:ss".parse().unwrap();
        l.run = run.map(String::from);
        l
    }

    #[test]
    fn a_login_types_the_user_the_password_then_the_command_and_exit() {
        let mut t = Typist::new(login(Some("id")));
        assert_eq!(t.next("[  OK  ] Started serial-getty@ttyS0.service"), None);
        assert_eq!(t.next("\r\npc01 login: ").as_deref(), Some("student\r"));
        assert_eq!(t.next("student\r\n"), None);
        assert_eq!(t.next("Password: ").as_deref(), Some("pa:ss\r"));
        assert_eq!(t.next("\r\nLinux pc01 6.1.0"), None);
        assert_eq!(t.next("student@pc01:~$ ").as_deref(), Some("id\rexit\r"));
        assert_eq!(t.step(), Step::Done);
        // Nothing more, whatever comes: the getty asks again after the exit.
        assert_eq!(t.next("\r\npc01 login: "), None);
    }

    #[test]
    fn a_refused_password_stops_the_typing() {
        let mut t = Typist::new(login(None));
        t.next("pc01 login: ");
        t.next("Password: ");
        assert_eq!(t.next("\r\nLogin incorrect\r\npc01 login: "), None);
        assert_eq!(t.step(), Step::Refused);
        assert_eq!(t.next("Password: "), None);
    }

    #[test]
    fn without_a_command_the_user_logs_out_at_once() {
        let mut t = Typist::new(login(None));
        t.next("pc01 login: ");
        t.next("Password: ");
        assert_eq!(t.next("root@pc01:~# ").as_deref(), Some("exit\r"));
    }

    #[test]
    fn bad_logins_are_refused_with_the_reason() {
        assert!(
            "student"
                .parse::<Login>()
                .unwrap_err()
                .contains("USER:PASSWORD")
        );
        assert!(":pw".parse::<Login>().unwrap_err().contains("user name"));
        assert!("a b:pw".parse::<Login>().unwrap_err().contains("user name"));
        assert!(
            "student:"
                .parse::<Login>()
                .unwrap_err()
                .contains("password")
        );
        assert_eq!("s:p".parse::<Login>().unwrap().password, "p");
    }
}
