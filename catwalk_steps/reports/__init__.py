"""Reports of several runs' metrics: tables (markdown, CSV, JSON), sweeps aggregated over seeds,
plots, and the table printed at the end of every `tango run`."""

from .files import ReportFormat, print_report
from .tables import Report, build_report

__all__ = ["Report", "ReportFormat", "build_report", "print_report"]
