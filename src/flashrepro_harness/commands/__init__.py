"""The subcommands of ``flashrepro`` (:data:`flashrepro_harness.cli.COMMANDS`), one module each.

A command module parses and calls: ``add_arguments(parser)`` declares its options and
``run(args) -> int`` calls the harness's logic and returns the exit code. The logic modules
never import this package.
"""
