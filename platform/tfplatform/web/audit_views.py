"""The staff audit log page: who did what to which object, before → after; filtered by
actor, action, object and time with the API's filters, a page at a time."""

import json
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tfplatform.audit.filters import AuditEntryFilter
from tfplatform.audit.models import AuditAction, AuditEntry
from tfplatform.audit.selectors import audit_entries
from tfplatform.web.cluster_views import staff_only

PAGE_SIZE = 50


@staff_only
@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    filtered = AuditEntryFilter(request.GET, queryset=audit_entries(user=request.user))
    valid = filtered.is_valid()
    entries = filtered.qs if valid else AuditEntry.objects.none()
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    others = request.GET.copy()
    others.pop("page", None)
    context = {
        "form": filtered.form,
        "page": page,
        "rows": [{"entry": entry, "changes": _changes(entry)} for entry in page],
        "actions": AuditAction.choices,
        "chosen": request.GET.getlist("action"),
        "query": others.urlencode(),
    }
    return render(request, "audit/list.html", context, status=200 if valid else 400)


def _changes(entry: AuditEntry) -> list[dict[str, str | None]]:
    """Field by field: what it was and what it became (None: it did not exist, before a
    creation or after a deletion)."""
    before = entry.before if isinstance(entry.before, dict) else {}
    after = entry.after if isinstance(entry.after, dict) else {}
    return [{"field": name,
             "before": _shown(before[name]) if name in before else None,
             "after": _shown(after[name]) if name in after else None}
            for name in dict.fromkeys([*before, *after])]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
