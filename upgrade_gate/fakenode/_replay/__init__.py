"""The replay side of a fake node: the code its fake executables run (stdlib only, fast start-up).

`build_fake_node` copies this package into the node directory and installs, under each tool name, a
three-line stub run by `python -I -S` that calls `main.main(tool, data_dir)`; nothing here imports
`upgrade_gate`, so a fake tool starts in a few milliseconds and does not depend on the project.
"""
