"""The bottom layer: the error tree, atomic files and locks, config rules, the command line
(parser, numeric flags, device, levels) and the local / Ray job pool. No model or task code."""
