from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path

from attnprof.server.auth import service
from attnprof.server.auth.dependencies import AdminProject, PrincipalDep
from attnprof.server.auth.models import Token
from attnprof.server.auth.schemas import (
    RotateIn,
    TokenCreated,
    TokenIn,
    TokenOut,
    TokenRotated,
    Tokens,
    Whoami,
    parse_duration,
)
from attnprof.server.db import INT_MAX, SessionDep
from attnprof.server.openapi import errors

router = APIRouter(prefix="/api/v1/projects/{project}/tokens", tags=["tokens"])
whoami_router = APIRouter(prefix="/api/v1", tags=["tokens"])
TokenId = Annotated[int, Path(ge=1, le=INT_MAX)]


def _actor(access: AdminProject) -> str:
    return f"token {access.principal.token_id}"


def _created(token: Token, secret: str) -> TokenCreated:
    return TokenCreated(**TokenOut.model_validate(token).model_dump(), token=secret)


@whoami_router.get("/token", response_model=Whoami)
def whoami(principal: PrincipalDep, session: SessionDep) -> Whoami:
    """What the bearer token is: its project (or testbed, for a worker token) and role."""
    return service.describe(session, principal)


@router.post("", status_code=201, response_model=TokenCreated)
def create_token(body: TokenIn, access: AdminProject, session: SessionDep) -> TokenCreated:
    """A token of the project, shown once; with ``expires_in`` it stops working after that long."""
    token, secret = service.create_project_token(
        session,
        project_id=access.project_id,
        role=body.role,
        name=body.name,
        expires_in=parse_duration(body.expires_in) if body.expires_in else None,
        actor=_actor(access),
    )
    return _created(token, secret)


@router.get("", response_model=Tokens)
def list_tokens(access: AdminProject, session: SessionDep) -> Tokens:
    return Tokens(
        tokens=[TokenOut.model_validate(t) for t in service.list_tokens(session, project_id=access.project_id)]
    )


@router.delete("/{token_id}", response_model=TokenOut)
def revoke_token(token_id: TokenId, access: AdminProject, session: SessionDep) -> TokenOut:
    return TokenOut.model_validate(
        service.revoke(session, project_id=access.project_id, token_id=token_id, actor=_actor(access))
    )


@router.post("/{token_id}/rotate", status_code=201, response_model=TokenRotated, responses=errors(409))
def rotate_token(
    token_id: TokenId,
    access: AdminProject,
    session: SessionDep,
    body: Annotated[RotateIn | None, Body()] = None,
) -> TokenRotated:
    """A new secret with the token's role and name, shown once; the old token is revoked at once, or after
    ``grace`` (it works until then). 409 for a token that is revoked, expired, or rotated already."""
    body = body or RotateIn()
    new, secret, old = service.rotate(
        session,
        project_id=access.project_id,
        token_id=token_id,
        grace=parse_duration(body.grace, zero=True) if body.grace else service.NO_GRACE,
        expires_in=parse_duration(body.expires_in) if body.expires_in else None,
        actor=_actor(access),
    )
    return TokenRotated(**_created(new, secret).model_dump(), replaced=TokenOut.model_validate(old))
