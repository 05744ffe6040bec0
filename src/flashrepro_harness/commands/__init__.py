"""The subcommands of ``flashrepro``, one module each (``add_arguments``, ``run``)."""
