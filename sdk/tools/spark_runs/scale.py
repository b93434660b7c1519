from __future__ import annotations

import argparse

HELP = "(in progress)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace, prog: str) -> int:
    raise NotImplementedError
