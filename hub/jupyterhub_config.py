"""JupyterHub for a servelab course on one server: `make hub` (as root) starts it with this file.

PAM logs in the machine's real users; the local process spawner starts each learner's JupyterLab as that Linux
user, from the course environment under SERVELAB_HUB_PREFIX (readable by everyone, never under a home folder).
Members of the servelab-instructors group get nbgrader's formgrader; everyone else gets the learner lab
(lab/learner: no instructor tools). nbgrader's exchange, named in the environment's nbgrader_config.py, carries
assignments out and submissions back. Settings come from the environment, so a test can run its own hub.
"""

import grp
import os

prefix = os.environ.get("SERVELAB_HUB_PREFIX", "/opt/servelab-hub")
state = os.environ.get("SERVELAB_HUB_STATE", f"{prefix}/state")    # root only: the hub's database and secrets
ip = os.environ.get("SERVELAB_HUB_IP", "127.0.0.1")
port = int(os.environ.get("SERVELAB_HUB_PORT", "8000"))
hub_port = int(os.environ.get("SERVELAB_HUB_API_PORT", "8081"))
proxy_port = int(os.environ.get("SERVELAB_HUB_PROXY_API_PORT", "8001"))
LEARNERS, INSTRUCTORS = "servelab-learners", "servelab-instructors"

c = get_config()  # noqa: F821 - injected by traitlets

c.JupyterHub.bind_url = f"http://{ip}:{port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{hub_port}"
c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{state}/jupyterhub.pid"
c.ConfigurableHTTPProxy.command = [f"{prefix}/node_modules/.bin/configurable-http-proxy"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_port}"

c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {LEARNERS, INSTRUCTORS}
c.LocalAuthenticator.create_system_users = False   # accounts come from the roster (hub/roster.py) only

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [f"{prefix}/venv/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def is_instructor(name: str) -> bool:
    try:
        return name in grp.getgrnam(INSTRUCTORS).gr_mem
    except KeyError:
        return False


def lab_for_role(spawner) -> None:
    """The learner lab for learners (instructor tools switched off), nbgrader's full lab for instructors."""
    if is_instructor(spawner.user.name):
        return
    learner = f"{prefix}/lab/learner"
    spawner.environment["JUPYTER_CONFIG_PATH"] = learner
    spawner.environment["SERVELAB_ROOT"] = f"{prefix}/root"     # what %check grades against (hub/install.sh)
    spawner.args = [*spawner.args, f"--LabApp.app_settings_dir={learner}/settings"]


c.Spawner.pre_spawn_hook = lab_for_role

# a test (or an admin script) may drive the hub through its REST API with a service token from the environment
token = os.environ.get("SERVELAB_HUB_API_TOKEN")
if token:
    c.JupyterHub.services = [{"name": "servelab-admin", "api_token": token}]
    c.JupyterHub.load_roles = [{"name": "servelab-admin", "services": ["servelab-admin"],
                                "scopes": ["read:hub", "admin:users", "admin:servers", "tokens", "access:servers"]}]
