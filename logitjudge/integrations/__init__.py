"""Scorers for the evaluation frameworks people already grade in (issue 54): each calls ``logitjudge serve`` (or
loads the judge) and reports the order-averaged exact scores. Nothing below the service imports this package."""
