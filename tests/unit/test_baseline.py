"""Tool choice of the offline lexical baseline provider."""

from __future__ import annotations

import pytest

from worker_service.baseline import DEFAULT_THRESHOLD, BaselineTool, choose_tool

pytestmark = pytest.mark.unit

TOOLS = [
    BaselineTool(
        server="todo",
        name="list_todos",
        description="Lists todos filtered by status, priority, tags, or due date",
        parameters=("status", "priority", "tags", "due_date_before", "due_date_after"),
    ),
    BaselineTool(
        server="todo",
        name="search_todos",
        description="Searches todos by keyword in title or description",
        parameters=("query", "status", "priority"),
    ),
    BaselineTool(
        server="todo", name="delete_todo", description="Deletes a todo by ID", parameters=("todo_id",)
    ),
    BaselineTool(
        server="jira",
        name="create_jira_issue",
        description="Create a new Jira issue in a project with a summary, issue type and assignee.",
        parameters=("project_key", "summary", "issue_type", "assignee"),
    ),
    BaselineTool(
        server="aws",
        name="list_s3_buckets",
        description="List the Amazon S3 buckets in the AWS account, optionally filtered by region.",
        parameters=("region",),
    ),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("search my todos for dentist", "search_todos"),
        ("list my open todos with high priority", "list_todos"),
        ("delete todo 42", "delete_todo"),
        ("create a jira ticket for the login bug", "create_jira_issue"),
        ("which s3 buckets do we have in eu-west-1", "list_s3_buckets"),
    ],
)
def test_picks_the_matching_tool(query: str, expected: str) -> None:
    """On-topic queries choose the tool whose words they use."""
    choice = choose_tool(query, TOOLS)
    assert choice.name == expected
    assert choice.server == next(t.server for t in TOOLS if t.name == expected)
    assert choice.score >= DEFAULT_THRESHOLD
    assert not choice.abstained


@pytest.mark.parametrize(
    "query", ["hello, how are you?", "what's the weather in Paris", "", "   ", "\ud800\x00"]
)
def test_abstains_off_topic(query: str) -> None:
    """Queries sharing nothing with any tool abstain."""
    choice = choose_tool(query, TOOLS)
    assert choice.abstained
    assert choice.server is None
    assert len(choice.scores) == len(TOOLS)


def test_abstains_below_threshold() -> None:
    """A weak match is rejected when the threshold is above its score and accepted at 0."""
    weak = choose_tool("todos", TOOLS)
    assert weak.score > 0
    assert choose_tool("todos", TOOLS, threshold=weak.score + 0.01).abstained
    assert choose_tool("todos", TOOLS, threshold=0.0).name is not None


def test_no_tools_abstains() -> None:
    """With nothing offered the baseline abstains with an empty score list."""
    choice = choose_tool("search my todos", [])
    assert choice.abstained
    assert choice.scores == []


def test_scores_sorted_and_ties_deterministic() -> None:
    """Scores are sorted descending and equal scores are ordered by server then name."""
    twins = [
        BaselineTool(server="b", name="get_weather", description="Weather forecast"),
        BaselineTool(server="a", name="get_weather", description="Weather forecast"),
    ]
    choice = choose_tool("weather forecast", twins)
    assert (choice.server, choice.name) == ("a", "get_weather")
    assert [s.server for s in choice.scores] == ["a", "b"]
    full = choose_tool("search todos by status", TOOLS)
    assert [s.score for s in full.scores] == sorted((s.score for s in full.scores), reverse=True)
    assert all(0.0 <= s.score <= 1.0 for s in full.scores)


def test_parameter_names_count() -> None:
    """A query naming a parameter only one tool has picks that tool."""
    choice = choose_tool("filter by due date before friday", TOOLS)
    assert choice.name == "list_todos"


def test_hostile_tool_text_is_tolerated() -> None:
    """Empty, huge and odd-unicode tool texts never raise."""
    odd = [
        BaselineTool(server="", name="", description=""),
        BaselineTool(server="x", name="huge", description="spam " * 200_000),
        BaselineTool(server="x", name="\u202eevil\u200b", description="\ud800 lone surrogate"),
    ]
    choice = choose_tool("spam", odd)
    assert choice.name == "huge"
