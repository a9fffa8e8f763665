//! The interactive loop of `evalsql` (neither `-c` nor `-f`): datafusion-cli's, with the
//! statements about monitors and alerts (`CREATE MONITOR`, `SHOW ALERTS`, ...) carried out
//! by the store's monitors as they are in `-c` and `-f`.
//!
//! datafusion-cli's loop (`exec::exec_from_repl`) parses every line with DataFusion's parser,
//! which does not know those statements, and has no hook before it does (its line
//! validator refuses them as "Invalid statement"). So this loop is written here, keeping
//! what users know of datafusion-cli's: its line editor (rustyline), its helper's
//! highlighting, hints and file-name completion, the `.history` file, the backslash
//! commands and Ctrl-C cancelling the running statement.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::config::FormatOptions;
use datafusion::prelude::SessionContext;
use datafusion_cli::cli_context::CliSessionContext;
use datafusion_cli::command::{Command, OutputFormat};
use datafusion_cli::exec::exec_from_commands;
use datafusion_cli::helper::CliHelper;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use crate::monitor::Monitors;

/// datafusion-cli's helper, with a validator that takes any input ending in `;` (or a
/// backslash command) as complete: the statement runner says what is wrong with it, as it
/// does in `-c`.
struct LineHelper(CliHelper);

impl Highlighter for LineHelper {
    fn highlight<'l>(&self, line: &'l str, pos: usize) -> Cow<'l, str> {
        self.0.highlight(line, pos)
    }

    fn highlight_char(&self, line: &str, pos: usize, kind: CmdKind) -> bool {
        self.0.highlight_char(line, pos, kind)
    }

    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        self.0.highlight_hint(hint)
    }
}

impl Hinter for LineHelper {
    type Hint = String;

    fn hint(&self, line: &str, pos: usize, ctx: &Context<'_>) -> Option<String> {
        self.0.hint(line, pos, ctx)
    }
}

impl Completer for LineHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> Result<(usize, Vec<Pair>), ReadlineError> {
        self.0.complete(line, pos, ctx)
    }
}

impl Validator for LineHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input().trim_end();
        self.0.reset_hint();
        Ok(if input.ends_with(';') || input.starts_with('\\') {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Helper for LineHelper {}

/// Prints a monitor statement's answer on stdout in `format`, whole.
pub fn print_answer(
    format: &PrintFormat,
    answer: datafusion::arrow::array::RecordBatch,
) -> datafusion::common::Result<()> {
    format.print_batches(
        &mut std::io::stdout(),
        answer.schema(),
        &[answer],
        MaxRows::Unlimited,
        true,
        &FormatOptions::default(),
    )
}

fn dialect(statements: &dyn CliSessionContext) -> datafusion::config::Dialect {
    statements
        .task_ctx()
        .session_config()
        .options()
        .sql_parser
        .dialect
}

/// Reads statements until `\q` or end of input: SQL through `statements` (datafusion-cli's
/// executor), monitor statements through `monitors`, each answer printed as
/// `print_options` say; an error is printed and the loop goes on.
pub async fn run(
    ctx: &SessionContext,
    statements: &dyn CliSessionContext,
    monitors: Option<&Arc<Monitors>>,
    print_options: &mut PrintOptions,
) -> rustyline::Result<()> {
    let mut rl = Editor::new()?;
    rl.set_helper(Some(LineHelper(CliHelper::new(
        &dialect(statements),
        print_options.color,
    ))));
    rl.load_history(".history").ok();
    // Lines read so far of a statement not ended yet. On a terminal the validator asks for
    // more lines until a `;`; from a pipe rustyline returns each line as it comes, so they
    // are gathered here (as on a terminal, a statement ends with `;`).
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() { "> " } else { "  " };
        let line = match rl.readline(prompt) {
            Ok(line) if pending.is_empty() && line.starts_with('\\') => Ok(line),
            Ok(line) => {
                pending.push_str(&line);
                pending.push('\n');
                if !pending.trim_end().ends_with(';') {
                    continue;
                }
                Ok(std::mem::take(&mut pending).trim_end().to_string())
            }
            Err(ReadlineError::Interrupted) => {
                pending.clear();
                Err(ReadlineError::Interrupted)
            }
            Err(e) => Err(e),
        };
        match line {
            Ok(line) if line.starts_with('\\') => {
                rl.add_history_entry(line.trim_end())?;
                let command = line.split_whitespace().collect::<Vec<_>>().join(" ");
                match command[1..].parse::<Command>() {
                    Ok(Command::Quit) => break,
                    Ok(Command::OutputFormat(None)) => {
                        println!("Output format is {:?}.", print_options.format)
                    }
                    Ok(Command::OutputFormat(Some(format))) => {
                        match format.parse::<OutputFormat>() {
                            Ok(format) => {
                                if let Err(e) = format.execute(print_options) {
                                    eprintln!("{e}")
                                }
                            }
                            Err(_) => eprintln!(
                                "'\\{}' is not a valid command, you can use '\\?' to see all \
                                 commands",
                                &line[1..]
                            ),
                        }
                    }
                    Ok(command) => {
                        if let Err(e) = command.execute(statements, print_options).await {
                            eprintln!("{e}")
                        }
                    }
                    Err(_) => eprintln!(
                        "'\\{}' is not a valid command, you can use '\\?' to see all commands",
                        &line[1..]
                    ),
                }
            }
            Ok(line) => {
                rl.add_history_entry(line.trim_end())?;
                let options = &*print_options;
                let work = crate::monitor::run_script(
                    ctx,
                    &line,
                    monitors,
                    |sql| async move { exec_from_commands(statements, vec![sql], options).await },
                    |answer| print_answer(&options.format, answer),
                );
                tokio::select! {
                    done = work => if let Err(e) = done {
                        eprintln!("{e}");
                    },
                    _ = tokio::signal::ctrl_c() => println!("^C"),
                }
                // A statement may have changed the dialect.
                let dialect = dialect(statements);
                if let Some(helper) = rl.helper_mut() {
                    helper.0.set_dialect(&dialect);
                }
            }
            Err(ReadlineError::Interrupted) => {
                println!("^C");
                if let Some(helper) = rl.helper() {
                    helper.0.reset_hint();
                }
            }
            Err(ReadlineError::Eof) => {
                println!("\\q");
                break;
            }
            Err(err) => {
                eprintln!("cannot read the next line: {err}");
                break;
            }
        }
    }
    rl.save_history(".history")
}
