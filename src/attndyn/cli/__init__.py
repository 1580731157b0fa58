"""The ``attndyn`` command line: option parsing and printing over :mod:`attndyn.studies`."""

import sys

import click

from .._version import __version__
from ._errors import one_line_warnings
from ._evolution import evolution
from ._modes import modes
from ._phase import phase_diagram
from ._runtime import cacheable_solves
from ._schemes import schemes


class _OneLineErrors(click.Group):
    """A group whose errors are one line on stderr: ``Error: …`` naming the parameter and
    the allowed values (status 2 for bad input, 1 for a failed run), where click prints a
    usage block, a hint and a blank line around it. Warnings are one line too
    (``warning: …``; :func:`._errors.one_line_warnings`)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        cacheable_solves()
        with one_line_warnings():
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)

    def _main(self, args, prog_name, complete_var, standalone_mode, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            # Without standalone mode click raises its errors instead of printing them, and
            # returns the exit status of --help and --version instead of exiting.
            return super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as error:
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `attndyn`: the help
                click.echo(error.format_message(), err=True)
                sys.exit(error.exit_code)
            where = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
            click.echo(f"Error: {error.format_message()}{where}", err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)


@click.group(
    cls=_OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
# The version the running source says, not the installed metadata (stale after a bump
# under an editable install; see attndyn._version).
@click.version_option(version=__version__, prog_name="attndyn")
def main() -> None:
    """Transformer tokens as interacting particles on the sphere."""


main.add_command(evolution)
main.add_command(modes)
main.add_command(phase_diagram)
main.add_command(schemes)
