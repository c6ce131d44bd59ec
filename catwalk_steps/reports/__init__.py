"""Reports of several runs' metrics: tables (markdown, CSV, JSON), task suites (task x run, with
the average), sweeps aggregated over seeds, plots, and the table printed at the end of every
`tango run`."""

from .files import ReportFormat, print_report
from .suite import build_suite_report
from .tables import Report, build_report

__all__ = ["Report", "ReportFormat", "build_report", "build_suite_report", "print_report"]
