"""Plots (matplotlib, Agg backend) of simulator and analysis results."""
