import { raw } from 'hono/html';
import type { Child } from 'hono/jsx';

/**
 * Every inspector page's frame. Styles and the one script are same-origin files (/ui/style.css,
 * /ui/app.js): the admin CSP allows no inline style or script, and none is needed.
 */
export function Layout(props: { title: string; auth: boolean; children?: Child }) {
  // The doctype keeps the browser out of quirks mode; raw() only ever wraps this constant.
  return (
    <>
      {raw('<!doctype html>')}
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <title>{`${props.title} · hookbucket`}</title>
          <link rel="icon" href="data:," />
          <link rel="stylesheet" href="/ui/style.css" />
          <script src="/ui/app.js" defer></script>
        </head>
        <body>
          <header>
            <nav>
              <a href="/" class="brand">
                hookbucket
              </a>
              <a href="/">buckets</a>
              <a href="/api/openapi.json">API</a>
              <a href="/metrics">metrics</a>
              {props.auth ? (
                <form method="post" action="/logout" class="logout">
                  <button type="submit">Log out</button>
                </form>
              ) : null}
            </nav>
          </header>
          <main>{props.children}</main>
        </body>
      </html>
    </>
  );
}

/** A page for a refusal (unknown bucket, bad filter, a read past its budget). */
export function ErrorPage(props: { title: string; message: string; auth: boolean }) {
  return (
    <Layout title={props.title} auth={props.auth}>
      <h1>{props.title}</h1>
      <p class="error">{props.message}</p>
      <p>
        <a href="/">Back to the buckets</a>
      </p>
    </Layout>
  );
}
