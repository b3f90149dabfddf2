/**
 * Renders again a widget output that the widget manager gave up on too early.
 *
 * After a page reload, JupyterLab's widget manager (jupyterlab_widgets 3.0)
 * looks a model up by polling for two seconds and then, if the restore from
 * the kernel has finished meanwhile, shows "Error displaying widget: model not
 * found" for good, even when the restore registered the model during the
 * poll's last sleep (jupyter-widgets/ipywidgets#4026). On a loaded machine a
 * notebook that shows one dashboard in several outputs then shows it in some
 * and this error in the others. This plugin watches notebook outputs for that
 * message and asks the output's renderer to render its model again a few
 * times, with growing delays; a model that exists by then is shown, and one
 * that never comes keeps the message.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Widget } from '@lumino/widgets';

export const MODEL_NOT_FOUND = 'Error displaying widget: model not found';
const WIDGET_VIEW = 'application/vnd.jupyter.widget-view+json';
/** Milliseconds before each new attempt, after the message appeared again. */
const DELAYS = [250, 1000, 2000, 4000, 8000];

/** What this plugin uses of a rendered output (a widget renderer). */
interface IRenderer {
  node: HTMLElement;
  mimeType?: string;
  renderModel(model: unknown): Promise<void>;
  removeClass(name: string): void;
}

/** What this plugin uses of a code cell's output area. */
interface IOutputArea {
  widgets: readonly Widget[];
  model: { length: number; get(index: number): unknown };
}

function outputAreas(app: JupyterFrontEnd): IOutputArea[] {
  const areas: IOutputArea[] = [];
  for (const panel of app.shell.widgets('main')) {
    const cells = (panel as unknown as { content?: { widgets?: readonly unknown[] } }).content
      ?.widgets;
    for (const cell of cells ?? []) {
      const area = (cell as { outputArea?: IOutputArea }).outputArea;
      if (area && area.model && Array.isArray(area.widgets)) {
        areas.push(area);
      }
    }
  }
  return areas;
}

/** The widget renderer whose node is ``node``, with the output model it renders. */
function rendererOf(app: JupyterFrontEnd, node: HTMLElement): [IRenderer, unknown] | null {
  for (const area of outputAreas(app)) {
    for (let i = 0; i < area.widgets.length && i < area.model.length; i++) {
      const child = area.widgets[i];
      if (!child.node.contains(node)) {
        continue;
      }
      const inner = (child as unknown as { widgets?: readonly unknown[] }).widgets ?? [child];
      for (const w of inner) {
        const r = w as IRenderer;
        if (typeof r.renderModel === 'function' && r.node === node &&
            (r.mimeType === undefined || r.mimeType === WIDGET_VIEW)) {
          return [r, area.model.get(i)];
        }
      }
    }
  }
  return null;
}

export class WidgetRecovery {
  constructor(app: JupyterFrontEnd) {
    this._app = app;
    this._observer = new MutationObserver(records => this._onMutations(records));
    this._observer.observe(document.body, { childList: true, subtree: true });
  }

  dispose(): void {
    this._observer.disconnect();
  }

  private _onMutations(records: MutationRecord[]): void {
    for (const record of records) {
      record.addedNodes.forEach(added => {
        const node = added.parentElement;
        if (added.nodeType === Node.TEXT_NODE && added.textContent === MODEL_NOT_FOUND && node) {
          this._schedule(node);
        }
      });
    }
  }

  private _schedule(node: HTMLElement): void {
    const attempt = this._attempts.get(node) ?? 0;
    if (attempt >= DELAYS.length) {
      return; // the model never came: the message stays
    }
    this._attempts.set(node, attempt + 1);
    window.setTimeout(() => this._retry(node), DELAYS[attempt]);
  }

  private _retry(node: HTMLElement): void {
    if (node.textContent !== MODEL_NOT_FOUND || !node.isConnected) {
      return;
    }
    const found = rendererOf(this._app, node);
    if (found === null) {
      return;
    }
    const [renderer, model] = found;
    renderer.removeClass('jupyter-widgets');
    void renderer.renderModel(model);
  }

  private readonly _app: JupyterFrontEnd;
  private readonly _observer: MutationObserver;
  private readonly _attempts = new WeakMap<HTMLElement, number>();
}

export const widgetRecoveryPlugin: JupyterFrontEndPlugin<void> = {
  id: 'nbtune:widget-recovery',
  description: 'Renders again widget outputs that show "model not found" once the model exists.',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    new WidgetRecovery(app);
  }
};
