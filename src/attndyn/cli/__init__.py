"""The ``attndyn`` command line: option parsing and printing over :mod:`attndyn.studies`."""

import click

from ._evolution import evolution
from ._phase import phase_diagram
from ._schemes import schemes


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="attndyn")
def main() -> None:
    """Transformer tokens as interacting particles on the sphere."""


main.add_command(evolution)
main.add_command(phase_diagram)
main.add_command(schemes)
