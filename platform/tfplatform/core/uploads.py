"""Request bodies over the limit are refused while they are read, before anything is stored.

Django caps a request's form fields (DATA_UPLOAD_MAX_MEMORY_SIZE) but streams its files to
temporary files of any size, and a view can only look at `upload.size` afterwards: a 50 GB POST
would fill the disk first. This handler, first of FILE_UPLOAD_HANDLERS, refuses a declared
Content-Length over PLATFORM_MAX_UPLOAD_BYTES at once and counts what actually arrives, so a
body that lies about its length is cut off at the same point.
"""

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadhandler import FileUploadHandler


def _too_big(limit: int) -> RequestDataTooBig:
    return RequestDataTooBig(f"The request is larger than {limit // 2**20} MiB.")


class BoundedUploadHandler(FileUploadHandler):
    def __init__(self, request: Any = None) -> None:
        super().__init__(request)
        self.limit = int(settings.PLATFORM.max_upload_bytes)
        self.received = 0

    def handle_raw_input(self, input_data: Any, META: Any, content_length: int, boundary: Any,
                         encoding: str | None = None) -> None:
        if content_length and content_length > self.limit:
            raise _too_big(self.limit)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            raise _too_big(self.limit)
        return raw_data  # the next handler stores it

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler makes the file
