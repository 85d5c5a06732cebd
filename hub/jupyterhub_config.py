"""JupyterHub for a servelab course on one server: `make hub` (as root) starts it with this file.

PAM logs in the machine's real users; the local process spawner starts each learner's JupyterLab as that Linux
user, from the course environment under SERVELAB_HUB_PREFIX (readable by everyone, never under a home folder).
Members of the servelab-instructors group get nbgrader's formgrader; everyone else gets the learner lab
(lab/learner: no instructor tools). nbgrader's exchange, named in the environment's nbgrader_config.py, carries
assignments out and submissions back. Settings come from the environment, so a test can run its own hub:

    SERVELAB_LEARNER_MEM=4G SERVELAB_LEARNER_CPUS=1    a learner's server and kernels together (hub/limits.py)
    SERVELAB_IDLE_TIMEOUT=3600                          a server idle this long (s) is stopped (jupyterhub-idle-culler)
    SERVELAB_HUB_SSL_CERT=... SERVELAB_HUB_SSL_KEY=...  HTTPS with the instructor's certificate and key
"""

import grp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import LimitedSpawner  # noqa: E402

prefix = os.environ.get("SERVELAB_HUB_PREFIX", "/opt/servelab-hub")
state = os.environ.get("SERVELAB_HUB_STATE", f"{prefix}/state")    # root only: the hub's database and secrets
ip = os.environ.get("SERVELAB_HUB_IP", "127.0.0.1")
port = int(os.environ.get("SERVELAB_HUB_PORT", "8000"))
hub_port = int(os.environ.get("SERVELAB_HUB_API_PORT", "8081"))
proxy_port = int(os.environ.get("SERVELAB_HUB_PROXY_API_PORT", "8001"))
LEARNERS, INSTRUCTORS = "servelab-learners", "servelab-instructors"

c = get_config()  # noqa: F821 - injected by traitlets

cert, key = os.environ.get("SERVELAB_HUB_SSL_CERT"), os.environ.get("SERVELAB_HUB_SSL_KEY")
if cert and key:
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = cert, key
c.JupyterHub.bind_url = f"{'https' if cert and key else 'http'}://{ip}:{port}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{hub_port}"
c.JupyterHub.db_url = f"sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{state}/jupyterhub.pid"
c.ConfigurableHTTPProxy.command = [f"{prefix}/node_modules/.bin/configurable-http-proxy"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_port}"

c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {LEARNERS, INSTRUCTORS}
c.LocalAuthenticator.create_system_users = False   # accounts come from the roster (hub/roster.py) only

c.JupyterHub.spawner_class = LimitedSpawner
c.Spawner.mem_limit = os.environ.get("SERVELAB_LEARNER_MEM", "4G")
c.Spawner.cpu_limit = float(os.environ.get("SERVELAB_LEARNER_CPUS", "1"))
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
    spawner.environment = dict(spawner.environment)     # this server's own copy, not the config's shared dict
    # whose drill numbers a notebook prints (servelab_autograder.exercises.variants): the hub user in this course
    spawner.environment["SERVELAB_COURSE_ID"] = os.environ.get("SERVELAB_COURSE_ID", "servelab")
    if is_instructor(spawner.user.name):
        spawner.mem_limit = spawner.cpu_limit = None     # the instructor grades whole courses
        return
    learner = f"{prefix}/lab/learner"
    spawner.environment["JUPYTER_CONFIG_PATH"] = learner
    spawner.environment["SERVELAB_ROOT"] = f"{prefix}/root"     # what %check grades against (hub/install.sh)
    spawner.args = [*spawner.args, f"--LabApp.app_settings_dir={learner}/settings"]


c.Spawner.pre_spawn_hook = lab_for_role

# servers idle longer than the timeout are stopped (their files stay); the culler reads each server's last activity
idle = int(os.environ.get("SERVELAB_IDLE_TIMEOUT", "3600"))
services = [{"name": "idle-culler", "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={idle}",
                                                f"--cull-every={max(5, min(300, idle // 4))}"]}]
roles = [{"name": "idle-culler", "services": ["idle-culler"],
          "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}]
if idle < 300:   # a short timeout (a test's) needs activity reported sooner than every 5 minutes
    c.JupyterHub.last_activity_interval = 5
    c.Spawner.environment = {"JUPYTERHUB_ACTIVITY_INTERVAL": "5"}

# a test (or an admin script) may drive the hub through its REST API with a service token from the environment
token = os.environ.get("SERVELAB_HUB_API_TOKEN")
if token:
    services.append({"name": "servelab-admin", "api_token": token})
    roles.append({"name": "servelab-admin", "services": ["servelab-admin"],
                  "scopes": ["read:hub", "admin:users", "admin:servers", "tokens", "access:servers"]})
c.JupyterHub.services = services
c.JupyterHub.load_roles = roles
