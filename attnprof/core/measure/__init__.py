"""Everything that imports torch: targets, timing, trace capture, counters, environment, the runner.

Nothing outside this package imports it except the local CLI's ``profile`` verb.
"""
