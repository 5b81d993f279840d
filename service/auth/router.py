from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.auth import service
from service.auth.dependencies import AdminProject, PrincipalDep
from service.auth.schemas import TokenCreated, TokenIn, TokenOut, Tokens, Whoami
from service.db import INT_MAX, SessionDep

router = APIRouter(prefix="/api/v1/projects/{project}/tokens", tags=["tokens"])
whoami_router = APIRouter(prefix="/api/v1", tags=["tokens"])


@whoami_router.get("/token", response_model=Whoami)
def whoami(principal: PrincipalDep, session: SessionDep) -> Whoami:
    """What the bearer token is: its project (or testbed, for a worker token) and role."""
    return service.describe(session, principal)


@router.post("", status_code=201, response_model=TokenCreated)
def create_token(body: TokenIn, access: AdminProject, session: SessionDep) -> TokenCreated:
    token, secret = service.create_project_token(session, project_id=access.project_id, role=body.role, name=body.name)
    return TokenCreated(**TokenOut.model_validate(token).model_dump(), token=secret)


@router.get("", response_model=Tokens)
def list_tokens(access: AdminProject, session: SessionDep) -> Tokens:
    return Tokens(
        tokens=[TokenOut.model_validate(t) for t in service.list_tokens(session, project_id=access.project_id)]
    )


@router.delete("/{token_id}", response_model=TokenOut)
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=INT_MAX)], access: AdminProject, session: SessionDep
) -> TokenOut:
    return TokenOut.model_validate(service.revoke(session, project_id=access.project_id, token_id=token_id))
