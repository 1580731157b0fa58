"""The ``attndyn`` command line."""

import click

from ._cli_evolution import evolution
from ._cli_phase import phase_diagram
from ._cli_schemes import schemes


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="attndyn")
def main() -> None:
    """Transformer tokens as interacting particles on the sphere."""


main.add_command(evolution)
main.add_command(phase_diagram)
main.add_command(schemes)
