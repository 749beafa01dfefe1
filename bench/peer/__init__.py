"""The peer benchmark: the dispatcher beside Kueue's MultiKueue on the same clusters, in
one run (`python -m bench peer`; the command line is in `cli.py`)."""
