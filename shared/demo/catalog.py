"""Demo MCP tool catalogs, as plain data.

The catalogs are built from the seed systems: RAG pipelines (seed 001), a todo service (seed 004) and the
github / jira / aws tools of an agent orchestrator (seed 002). `shared.demo.servers` serves them as real MCP
servers; `shared.demo.cases` holds sample test cases over them.

Two deliberate properties the rest of the system relies on:

- Both transports are exercised: `todo` speaks `sse`, every other server `streamable-http`.
- ONE tool name collides across servers: `get_issue` exists on `github` (GitHub issue by number) and on `jira`
  (Jira issue by key), so a run offering both servers must namespace tool names and map them back.

`DemoServerSpec` and `DemoTool` are public: tests build ad-hoc specs (e.g. a one-tool "geometry" server) and hand
them to `shared.demo.servers.run_demo_servers`.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import msgspec

Transport = Literal["streamable-http", "sse"]
"""The two MCP transports mcpeval supports, spelled as the REST API and the seed spell them."""


class DemoTool(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP tool: what `tools/list` advertises for it, byte for byte."""

    name: str
    description: str
    input_schema: dict[str, Any]
    """A JSON Schema object (`type: object` at the root), advertised unchanged as the tool's `inputSchema`."""


class DemoServerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server: its registration name, the transport it speaks and its tools."""

    name: str
    transport: Transport
    tools: list[DemoTool]
    description: str = ""

    def tool(self, name: str) -> DemoTool:
        """Return the tool called `name`; raise KeyError when this server has none."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(f"server {self.name!r} has no tool {name!r}")


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """Build a closed object schema; `required` is always present so schemas compare predictably."""
    return {
        "type": "object",
        # Deep copy: property fragments are shared between tools here, and no tool's schema may alias another's.
        "properties": copy.deepcopy(properties),
        "required": required or [],
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------------------------------------- rag (001)
# Common parameters of every RAG pipeline tool, per seed 001 ("Common: top_k, include_sources, include_metadata").
def _rag_common() -> dict[str, Any]:
    return {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 8000,
            "description": "The question or search query to answer from the document collection.",
        },
        "top_k": {
            "type": "integer",
            "minimum": 1,
            "maximum": 50,
            "default": 5,
            "description": "Number of documents to retrieve (1-50).",
        },
        "include_sources": {
            "type": "boolean",
            "default": True,
            "description": "Return the source file names used for citations.",
        },
        "include_metadata": {
            "type": "boolean",
            "default": False,
            "description": "Return pipeline metadata (timings, token counts, pipeline-specific details).",
        },
    }


RAG_TOOLS: list[DemoTool] = [
    DemoTool(
        name="rag_basic",
        description=(
            "Basic RAG with vector similarity search - best for general Q&A over the document collection. "
            "Embeds the query, retrieves the top_k most similar chunks and generates an answer from them."
        ),
        input_schema=_object(_rag_common(), ["query"]),
    ),
    DemoTool(
        name="rag_basic_rerank",
        description=(
            "Basic RAG followed by cross-encoder reranking of the retrieved passages - higher precision when "
            "only the most relevant passages should reach the answer. Slower than rag_basic."
        ),
        input_schema=_object(_rag_common(), ["query"]),
    ),
    DemoTool(
        name="rag_crag",
        description=(
            "Corrective RAG (CRAG): grades retrieval confidence and corrects low-confidence retrievals by "
            "rewriting the query, decomposing it or falling back to web search - best when accuracy matters "
            "and the collection may not contain the answer."
        ),
        input_schema=_object(
            {
                **_rag_common(),
                "confidence_threshold": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "default": 0.8,
                    "description": "Retrieval confidence (0-1) below which a correction is applied.",
                },
                "correction_strategy": {
                    "type": "string",
                    "enum": ["rewrite", "decompose", "web_search"],
                    "default": "rewrite",
                    "description": "How to correct a low-confidence retrieval.",
                },
            },
            ["query"],
        ),
    ),
    DemoTool(
        name="rag_graphrag",
        description=(
            "Hybrid GraphRAG: combines vector search with knowledge graph traversal over extracted entities and "
            "relationships - best for multi-hop questions about how entities are connected or related."
        ),
        input_schema=_object(_rag_common(), ["query"]),
    ),
    DemoTool(
        name="rag_pylate_colbert",
        description=(
            "ColBERT late-interaction retrieval (PyLate): token-level matching between query and passages - "
            "best for exact phrases, rare technical terms and precise terminology."
        ),
        input_schema=_object(
            {
                **_rag_common(),
                "interaction_threshold": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "default": 0.5,
                    "description": "Minimum token interaction score (0-1) for a passage to count as a match.",
                },
            },
            ["query"],
        ),
    ),
    DemoTool(
        name="rag_iris_global_graphrag",
        description=(
            "Global GraphRAG on InterSystems IRIS: answers corpus-wide questions by summarising community "
            "clusters of the knowledge graph - best for broad themes and overviews across the entire collection."
        ),
        input_schema=_object(_rag_common(), ["query"]),
    ),
]

# --------------------------------------------------------------------------------------------------- todo (004)
_TODO_STATUS = {
    "type": "string",
    "enum": ["pending", "in_progress", "completed"],
    "description": "Todo status.",
}
_TODO_PRIORITY = {
    "type": "integer",
    "minimum": 1,
    "maximum": 5,
    "description": "Priority from 1 (lowest) to 5 (highest).",
}
_TODO_TAGS = {"type": "array", "items": {"type": "string"}, "description": "Tags attached to the todo."}
_TODO_ID = {"type": "integer", "minimum": 1, "description": "Numeric ID of the todo."}

TODO_TOOLS: list[DemoTool] = [
    DemoTool(
        name="create_todo",
        description=(
            "Creates a new todo item with title, optional description, priority, tags, and due date."
        ),
        input_schema=_object(
            {
                "title": {"type": "string", "minLength": 1, "description": "Short title of the todo."},
                "description": {"type": "string", "description": "Longer free-text description."},
                "priority": _TODO_PRIORITY,
                "tags": _TODO_TAGS,
                "due_date": {"type": "string", "format": "date", "description": "Due date (YYYY-MM-DD)."},
            },
            ["title"],
        ),
    ),
    DemoTool(
        name="list_todos",
        description="Lists todos filtered by status, priority, tags, or due date.",
        input_schema=_object(
            {
                "status": _TODO_STATUS,
                "priority": _TODO_PRIORITY,
                "tags": {**_TODO_TAGS, "description": "Only todos carrying all of these tags."},
                "due_date_before": {
                    "type": "string",
                    "format": "date",
                    "description": "Only todos due on or before this date (YYYY-MM-DD).",
                },
                "due_date_after": {
                    "type": "string",
                    "format": "date",
                    "description": "Only todos due on or after this date (YYYY-MM-DD).",
                },
            }
        ),
    ),
    DemoTool(
        name="update_todo",
        description="Updates an existing todo's fields by ID.",
        input_schema=_object(
            {
                "todo_id": _TODO_ID,
                "title": {"type": "string", "minLength": 1, "description": "New title."},
                "description": {"type": "string", "description": "New description."},
                "status": _TODO_STATUS,
                "priority": _TODO_PRIORITY,
                "tags": _TODO_TAGS,
                "due_date": {"type": "string", "format": "date", "description": "New due date (YYYY-MM-DD)."},
            },
            ["todo_id"],
        ),
    ),
    DemoTool(
        name="search_todos",
        description="Searches todos by keyword in title or description.",
        input_schema=_object(
            {
                "query": {"type": "string", "minLength": 1, "description": "Keyword(s) to look for."},
                "status": _TODO_STATUS,
                "priority": _TODO_PRIORITY,
            },
            ["query"],
        ),
    ),
    DemoTool(
        name="delete_todo",
        description="Deletes a todo by ID.",
        input_schema=_object({"todo_id": _TODO_ID}, ["todo_id"]),
    ),
]

# ------------------------------------------------------------------------------------------------- github (002)
_OWNER = {"type": "string", "description": "Repository owner (user or organisation), e.g. 'octocat'."}
_REPO = {"type": "string", "description": "Repository name without the owner, e.g. 'hello-world'."}
_PER_PAGE = {
    "type": "integer",
    "minimum": 1,
    "maximum": 100,
    "default": 30,
    "description": "Results per page (1-100).",
}

GITHUB_TOOLS: list[DemoTool] = [
    DemoTool(
        name="list_commits",
        description=(
            "List commits of a GitHub repository, newest first, optionally filtered by branch, author, "
            "file path and date range."
        ),
        input_schema=_object(
            {
                "owner": _OWNER,
                "repo": _REPO,
                "sha": {
                    "type": "string",
                    "description": "Branch name, tag or commit SHA to start listing from.",
                },
                "author": {"type": "string", "description": "GitHub login or email address of the author."},
                "path": {"type": "string", "description": "Only commits touching this file path."},
                "since": {
                    "type": "string",
                    "format": "date-time",
                    "description": "Only commits after this ISO 8601 timestamp.",
                },
                "until": {
                    "type": "string",
                    "format": "date-time",
                    "description": "Only commits before this ISO 8601 timestamp.",
                },
                "per_page": _PER_PAGE,
            },
            ["owner", "repo"],
        ),
    ),
    DemoTool(
        name="list_pull_requests",
        description="List pull requests of a GitHub repository, filtered by state and base/head branch.",
        input_schema=_object(
            {
                "owner": _OWNER,
                "repo": _REPO,
                "state": {"type": "string", "enum": ["open", "closed", "all"], "default": "open"},
                "base": {"type": "string", "description": "Only pull requests targeting this base branch."},
                "head": {"type": "string", "description": "Only pull requests from this head 'user:branch'."},
                "sort": {
                    "type": "string",
                    "enum": ["created", "updated", "popularity", "long-running"],
                    "default": "created",
                },
                "direction": {"type": "string", "enum": ["asc", "desc"], "default": "desc"},
                "per_page": _PER_PAGE,
            },
            ["owner", "repo"],
        ),
    ),
    DemoTool(
        name="get_file",
        description=(
            "Get the contents of a file (or a directory listing) from a GitHub repository at a branch, tag "
            "or commit."
        ),
        input_schema=_object(
            {
                "owner": _OWNER,
                "repo": _REPO,
                "path": {"type": "string", "description": "Path of the file inside the repository."},
                "ref": {
                    "type": "string",
                    "description": "Branch, tag or commit SHA; default branch if omitted.",
                },
            },
            ["owner", "repo", "path"],
        ),
    ),
    DemoTool(
        # Deliberate collision with jira.get_issue: same name, different system and arguments.
        name="get_issue",
        description="Get a GitHub issue by its number: title, body, state, labels, assignees and comments count.",
        input_schema=_object(
            {
                "owner": _OWNER,
                "repo": _REPO,
                "issue_number": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The issue number, e.g. 1234.",
                },
            },
            ["owner", "repo", "issue_number"],
        ),
    ),
    DemoTool(
        name="search_repositories",
        description="Search GitHub repositories by keywords, language, topic or stars (GitHub search syntax).",
        input_schema=_object(
            {
                "query": {
                    "type": "string",
                    "description": "GitHub search query, e.g. 'web framework language:python stars:>1000'.",
                },
                "sort": {
                    "type": "string",
                    "enum": ["stars", "forks", "updated"],
                    "description": "Sort field.",
                },
                "per_page": _PER_PAGE,
            },
            ["query"],
        ),
    ),
]

# --------------------------------------------------------------------------------------------------- jira (002)
_ISSUE_KEY = {
    "type": "string",
    "pattern": "^[A-Z][A-Z0-9]+-[0-9]+$",
    "description": "Jira issue key, e.g. 'PROJ-123'.",
}

JIRA_TOOLS: list[DemoTool] = [
    DemoTool(
        name="search_issues",
        description="Search Jira issues with a JQL query, e.g. 'project = PAY AND status = \"In Progress\"'.",
        input_schema=_object(
            {
                "jql": {"type": "string", "minLength": 1, "description": "JQL query string."},
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 50,
                    "description": "Maximum number of issues to return.",
                },
                "start_at": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Pagination offset.",
                },
                "fields": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Issue fields to return, e.g. ['summary', 'status'].",
                },
            },
            ["jql"],
        ),
    ),
    DemoTool(
        name="create_issue",
        description="Create a Jira issue (bug, task, story or epic) in a project.",
        input_schema=_object(
            {
                "project_key": {
                    "type": "string",
                    "pattern": "^[A-Z][A-Z0-9]+$",
                    "description": "Key of the Jira project, e.g. 'WEB'.",
                },
                "summary": {
                    "type": "string",
                    "minLength": 1,
                    "description": "One-line summary of the issue.",
                },
                "issue_type": {"type": "string", "enum": ["Bug", "Task", "Story", "Epic"]},
                "description": {"type": "string", "description": "Detailed description."},
                "priority": {"type": "string", "enum": ["Highest", "High", "Medium", "Low", "Lowest"]},
                "assignee": {"type": "string", "description": "Account name of the assignee."},
                "labels": {"type": "array", "items": {"type": "string"}, "description": "Labels to attach."},
            },
            ["project_key", "summary", "issue_type"],
        ),
    ),
    DemoTool(
        # Deliberate collision with github.get_issue.
        name="get_issue",
        description="Get a Jira issue by key (e.g. PROJ-123): summary, status, assignee, priority and comments.",
        input_schema=_object(
            {
                "issue_key": _ISSUE_KEY,
                "fields": {"type": "array", "items": {"type": "string"}, "description": "Fields to return."},
                "include_changelog": {"type": "boolean", "default": False, "description": "Include history."},
            },
            ["issue_key"],
        ),
    ),
    DemoTool(
        name="transition_issue",
        description="Move a Jira issue to another workflow status, e.g. from 'In Progress' to 'Done'.",
        input_schema=_object(
            {
                "issue_key": _ISSUE_KEY,
                "transition": {
                    "type": "string",
                    "enum": ["To Do", "In Progress", "In Review", "Done"],
                    "description": "Target workflow status.",
                },
                "comment": {"type": "string", "description": "Optional comment added with the transition."},
            },
            ["issue_key", "transition"],
        ),
    ),
    DemoTool(
        name="add_comment",
        description="Add a comment to a Jira issue.",
        input_schema=_object(
            {
                "issue_key": _ISSUE_KEY,
                "body": {"type": "string", "minLength": 1, "description": "Comment text."},
            },
            ["issue_key", "body"],
        ),
    ),
]

# ---------------------------------------------------------------------------------------------------- aws (002)
_REGION = {"type": "string", "description": "AWS region code, e.g. 'us-east-1'."}

AWS_TOOLS: list[DemoTool] = [
    DemoTool(
        name="list_s3_buckets",
        description="List the S3 buckets of the AWS account, optionally only those in a region or with a prefix.",
        input_schema=_object(
            {
                "region": _REGION,
                "prefix": {
                    "type": "string",
                    "description": "Only buckets whose name starts with this prefix.",
                },
            }
        ),
    ),
    DemoTool(
        name="describe_ec2_instances",
        description="Describe EC2 instances: ID, type, state, IP addresses and tags, filtered by state or tag.",
        input_schema=_object(
            {
                "region": _REGION,
                "instance_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Instance IDs.",
                },
                "state": {
                    "type": "string",
                    "enum": ["pending", "running", "stopping", "stopped", "terminated"],
                    "description": "Only instances in this state.",
                },
                "tag_filters": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Tag key/value pairs that must all match, e.g. {'env': 'prod'}.",
                },
                "max_results": {"type": "integer", "minimum": 5, "maximum": 1000, "default": 100},
            }
        ),
    ),
    DemoTool(
        name="list_iam_users",
        description="List IAM users of the AWS account with their creation date and last password use.",
        input_schema=_object(
            {
                "path_prefix": {
                    "type": "string",
                    "default": "/",
                    "description": "Only users under this IAM path, e.g. '/engineering/'.",
                },
                "include_mfa_status": {
                    "type": "boolean",
                    "default": False,
                    "description": "Report MFA devices.",
                },
                "max_items": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
            }
        ),
    ),
    DemoTool(
        name="get_cost_and_usage",
        description="Get AWS cost and usage (Cost Explorer) for a date range, grouped by service, region or tag.",
        input_schema=_object(
            {
                "start_date": {
                    "type": "string",
                    "format": "date",
                    "description": "Start (inclusive) YYYY-MM-DD.",
                },
                "end_date": {
                    "type": "string",
                    "format": "date",
                    "description": "End (exclusive) YYYY-MM-DD.",
                },
                "granularity": {"type": "string", "enum": ["DAILY", "MONTHLY"], "default": "MONTHLY"},
                "group_by": {"type": "string", "enum": ["SERVICE", "REGION", "LINKED_ACCOUNT", "TAG"]},
            },
            ["start_date", "end_date"],
        ),
    ),
    DemoTool(
        name="list_cloudwatch_alarms",
        description="List CloudWatch metric alarms, optionally only those in a given state or with a name prefix.",
        input_schema=_object(
            {
                "state": {"type": "string", "enum": ["OK", "ALARM", "INSUFFICIENT_DATA"]},
                "alarm_name_prefix": {
                    "type": "string",
                    "description": "Only alarms whose name starts with this.",
                },
                "region": _REGION,
            }
        ),
    ),
]

DEMO_SERVERS: list[DemoServerSpec] = [
    DemoServerSpec(
        name="rag",
        transport="streamable-http",
        tools=RAG_TOOLS,
        description="Six RAG pipelines over a medical document collection (seed 001).",
    ),
    DemoServerSpec(
        name="todo",
        transport="sse",
        tools=TODO_TOOLS,
        description="A personal todo list (seed 004); speaks the legacy SSE transport.",
    ),
    DemoServerSpec(
        name="github",
        transport="streamable-http",
        tools=GITHUB_TOOLS,
        description="GitHub repositories, commits, pull requests and issues (seed 002).",
    ),
    DemoServerSpec(
        name="jira",
        transport="streamable-http",
        tools=JIRA_TOOLS,
        description="Jira issue tracking (seed 002).",
    ),
    DemoServerSpec(
        name="aws",
        transport="streamable-http",
        tools=AWS_TOOLS,
        description="AWS account inventory and costs: S3, EC2, IAM, Cost Explorer, CloudWatch (seed 002).",
    ),
]
"""The bundled demo servers, in a stable order (`mcpeval demo` and `--port-base` assign ports in this order)."""

COLLIDING_TOOL_NAME = "get_issue"
"""The tool name that exists on two demo servers (`github` and `jira`) on purpose."""


def demo_server(name: str) -> DemoServerSpec:
    """Return the bundled demo server spec called `name`; raise KeyError when there is none."""
    for spec in DEMO_SERVERS:
        if spec.name == name:
            return spec
    raise KeyError(f"no demo server {name!r}")
