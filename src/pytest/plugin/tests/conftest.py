"""The plugin's own tests: its modules are imported under the names the binary ships them by
(`fixgate_plugin_<file>`), from the folder above, as the loader (src/pytest/plugin_shim.py) names
them in a run. Run by `cargo test` (tests/run.rs) with the interpreter the Rust tests use, or by
hand: `python -m pytest src/pytest/plugin/tests`. The binary embeds the modules only, never
this folder."""

import importlib.abc
import importlib.util
import os
import sys

PLUGIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "fixgate_plugin_"


class _PluginModules(importlib.abc.MetaPathFinder):
    """Finds `fixgate_plugin_<name>` as the plugin folder's `<name>.py`."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(PREFIX):
            return None
        source = os.path.join(PLUGIN, name[len(PREFIX) :] + ".py")
        if not os.path.isfile(source):
            return None
        return importlib.util.spec_from_file_location(name, source)


sys.meta_path.insert(0, _PluginModules())
