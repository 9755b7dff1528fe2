from django.contrib.admin.apps import AdminConfig


class PlatformAdminConfig(AdminConfig):
    """The Django admin, with the platform's tenant-aware site as `admin.site`."""

    default_site = "tenants.admin_site.PlatformAdminSite"
