from django.contrib import admin

from tfplatform.searches.models import Search, SearchTag, SearchTrial


class SearchTrialInline(admin.TabularInline):
    model = SearchTrial
    extra = 0
    can_delete = False
    fields = ("index", "experiment", "params", "rung", "outcome", "best_value", "best_epoch")
    readonly_fields = fields


@admin.register(Search)
class SearchAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "team", "searcher", "state", "max_trials",
                    "max_concurrent", "created_at"]
    list_filter = ["state", "searcher"]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["owner", "team", "state", "end_reason", "finished_at"]
    inlines = [SearchTrialInline]


@admin.register(SearchTag)
class SearchTagAdmin(admin.ModelAdmin):
    list_display = ["name", "search"]
    search_fields = ["name", "search__name"]
    raw_id_fields = ["search"]
