"""A whole Cinder in one process for the tests: API, scheduler and volume service on
``cinder.service`` with oslo.messaging's in-process ``fake:/`` transport (no message broker).

Run with the Cinder venv's Python: ``python launcher.py --config-file cinder.conf``.
Not part of what a compute host installs (scripts/test-cinder.sh starts it).
"""

from cinder import monkey_patch

monkey_patch.patch()  # before anything else

import sys  # noqa: E402

from cinder import i18n  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_log import log as logging  # noqa: E402
from oslo_service import service as oslo_service  # noqa: E402

i18n.enable_lazy()

from cinder import coordination, objects, rpc, service, version  # noqa: E402
from cinder.common import config  # noqa: E402  (registers the options)


def main() -> None:
    objects.register_all()
    cfg.CONF(sys.argv[1:], project="cinder", version=version.version_string())
    config.set_middleware_defaults()
    logging.setup(cfg.CONF, "cinder")
    coordination.COORDINATOR.start()
    rpc.init(cfg.CONF)
    launcher = oslo_service.ServiceLauncher(cfg.CONF)  # one process: fake:/ is in-process
    launcher.launch_service(service.WSGIService("osapi_volume"))
    launcher.launch_service(service.Service.create(binary="cinder-scheduler"))
    for backend in filter(None, cfg.CONF.enabled_backends):
        launcher.launch_service(service.Service.create(
            host=f"{cfg.CONF.host}@{backend}", service_name=backend, binary="cinder-volume",
            coordination=True))
    launcher.wait()


if __name__ == "__main__":
    main()
