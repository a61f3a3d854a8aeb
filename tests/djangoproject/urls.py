"""The test project's URLs: shardq's dashboard under /queue-admin/, as a project would include it."""

from django.urls import include, path

urlpatterns = [path("queue-admin/", include("shardq.contrib.django.urls"))]
