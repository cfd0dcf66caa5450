"""The one exception type a user of gumiho_core needs to catch."""


class GumihoError(ValueError):
    """Bad input or an unusable model/checkpoint. The message names the bad value and what is allowed.

    Front ends (CLI, app) print the message as is; it never needs a traceback to be understood.
    """
